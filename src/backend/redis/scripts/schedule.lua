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
--   ''. Reads only: an idle queue's firer writes nothing (SPEC 8, Idle).
-- swap: ARGV[3] name, ARGV[4] the generation the caller read ('0':
--   absent), ARGV[5] '1' write or '0' delete, ARGV[6] the due-index time
--   ('' none: paused or ended), ARGV[7] the record, ARGV[8] max_backlog
--   ('' none), then per item six values: flow, payload, not_before (the
--   slot), tier, boost, cost. If the generation is not the caller's,
--   returns { 'conflict' } and changes nothing; a batch past max_backlog
--   returns { 'full', limit } and changes nothing; else adds the items
--   (delayed until their slots), writes or deletes the record under a new
--   generation and returns { 'ok', id, ... }. The items and the move of
--   the next fire time are this one script: exactly once per slot.
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

-- swap
local name = ARGV[3]
local g, last = meta_of(name)
if g ~= tonumber(ARGV[4]) then return { 'conflict' } end
local n = (#ARGV - 8) / 6
if over_capacity(ARGV[8], n) then return { 'full', ARGV[8] } end
local out = { 'ok' }
if n > 0 then
  adds_begin(now)
  local enq = fmt(now)
  for i = 0, n - 1 do
    local b = 9 + i * 6
    out[#out + 1] = new_item(ARGV[b], ARGV[b + 1], enq, ARGV[b + 2], ARGV[b + 3], ARGV[b + 4],
      '0', '', now, 0, ARGV[b + 5])
  end
  adds_end()
  wake()
  last = out[#out]
end
redis.call('ZREM', K_SCHED_DUE, name)
if ARGV[5] == '1' then
  local gen = redis.call('INCR', K_SCHED_GEN)
  redis.call('HSET', K_SCHED, name, ARGV[7])
  redis.call('HSET', K_SCHED_META, name, fmt(gen) .. ':' .. last)
  if ARGV[6] ~= '' then redis.call('ZADD', K_SCHED_DUE, ARGV[6], name) end
else
  redis.call('HDEL', K_SCHED, name)
  redis.call('HDEL', K_SCHED_META, name)
end
return out
