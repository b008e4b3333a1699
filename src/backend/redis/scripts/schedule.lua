-- SPEC 13, Schedules: the two storage primitives the schedule operations
-- are written over (`schedule::fire` in Rust). Keys, all in the
-- namespace's slot: {ns}:sched (hash name -> the schedule's record),
-- {ns}:sched:meta (hash name -> "<generation>:<last item id or empty>"),
-- {ns}:sched:due (sorted set of the schedules that may fire, by next fire
-- time in ms), {ns}:sched:gen (the generation counter: never repeats).
-- ARGV: now, op, then the op's arguments.
--
-- load: ARGV[3] 'all', 'one' (ARGV[4] the name) or 'due' (ARGV[4] the
--   most rows). Returns { later, name, meta, record, name, meta, record,
--   ... }, `later` the soonest next fire time after now for 'due', else
--   ''. Reads only: an idle queue's firer writes nothing (SPEC 6, Idle).
-- swaps: ARGV[3] max_backlog ('' none), then one or more swaps, each
--   ARGV name, the generation the caller read ('0': absent), '1' write or
--   '0' delete, the due-index time ('' none: paused or ended), the
--   record, the item count n, then per item six values: flow, payload,
--   not_before (the slot), tier, boost, cost. Each swap in turn: if the
--   generation is not the caller's it answers 'conflict' and changes
--   nothing; if its items would pass max_backlog it answers 'full' and
--   changes nothing; else it adds the items (delayed until their slots),
--   writes or deletes the record under a new generation and answers
--   'ok' with the item ids. The reply is, per swap, its status, a count
--   and that many values: { 'ok', k, id..., 'conflict', 0, 'full', 1,
--   limit, ... }. The items and the move of the next fire time of a
--   schedule are one script: exactly once per slot. A firer sends every
--   due schedule of one firing in one call (SPEC 13).
local now = clock_now()
local op = ARGV[2]
local K_SCHED = P .. 'sched'
local K_SCHED_META = P .. 'sched:meta'
local K_SCHED_DUE = P .. 'sched:due'
local K_SCHED_GEN = P .. 'sched:gen'

local function meta_of(name)
  local m = redis.call('HGET', K_SCHED_META, name)
  if not m then return 0, '' end
  local g, l = string.match(m, '^(%d+):(%d*)$')
  return tonumber(g) or -1, l or ''
end

if op == 'load' then
  local kind = ARGV[3]
  local out = { '' }
  local names
  if kind == 'all' then
    names = redis.call('HKEYS', K_SCHED)
  elseif kind == 'one' then
    names = { ARGV[4] }
  else
    names = redis.call('ZRANGEBYSCORE', K_SCHED_DUE, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
    local later = redis.call('ZRANGEBYSCORE', K_SCHED_DUE, '(' .. fmt(now), '+inf',
      'WITHSCORES', 'LIMIT', 0, 1)
    if later[2] then out[1] = fmt(tonumber(later[2])) end
  end
  for _, name in ipairs(names) do
    local rec = redis.call('HGET', K_SCHED, name)
    if rec then
      out[#out + 1] = name
      out[#out + 1] = redis.call('HGET', K_SCHED_META, name) or '0:'
      out[#out + 1] = rec
    end
  end
  return out
end

-- swaps
local limit = ARGV[3]
local out = {}
local woke = false

local function swap_at(b)
  local name = ARGV[b]
  local n = tonumber(ARGV[b + 5]) or 0
  local g, last = meta_of(name)
  if g ~= tonumber(ARGV[b + 1]) then
    out[#out + 1] = 'conflict'
    out[#out + 1] = '0'
    return
  end
  if over_capacity(limit, n) then
    out[#out + 1] = 'full'
    out[#out + 1] = '1'
    out[#out + 1] = limit
    return
  end
  out[#out + 1] = 'ok'
  out[#out + 1] = fmt(n)
  if n > 0 then
    adds_begin(now)
    local enq = fmt(now)
    for i = 0, n - 1 do
      local c = b + 6 + i * 6
      last = new_item(ARGV[c], ARGV[c + 1], enq, ARGV[c + 2], ARGV[c + 3], ARGV[c + 4],
        '0', '', now, 0, ARGV[c + 5])
      out[#out + 1] = last
    end
    adds_end()
    woke = true
  end
  redis.call('ZREM', K_SCHED_DUE, name)
  if ARGV[b + 2] == '1' then
    local gen = redis.call('INCR', K_SCHED_GEN)
    redis.call('HSET', K_SCHED, name, ARGV[b + 4])
    redis.call('HSET', K_SCHED_META, name, fmt(gen) .. ':' .. last)
    if ARGV[b + 3] ~= '' then redis.call('ZADD', K_SCHED_DUE, ARGV[b + 3], name) end
  else
    redis.call('HDEL', K_SCHED, name)
    redis.call('HDEL', K_SCHED_META, name)
  end
end

local b = 4
while b <= #ARGV do
  local n = tonumber(ARGV[b + 5]) or 0
  swap_at(b)
  b = b + 6 + n * 6
end
if woke then wake() end
return out
