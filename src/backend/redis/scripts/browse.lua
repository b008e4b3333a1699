-- SPEC 12.1, read only. ARGV: now, op, then
--   list: state, offset, budget, limit, needle ("" for none), the state's
--         retention `<count>:<age ms>:<slack>` (completed and cancelled only);
--         returns {ended (0/1), looked, {row...}}
--   find: id, the completed and the cancelled retention; returns {row} or
--         {}
-- row = {id, flow, payload, enq, nb, dlv, st, ca, owner, reason, failed, pri,
--        cost, held (1/0), last touch ("" unless pending), cancelling (1/0:
--        a pending item marked by `cancel`, SPEC 3, Cancelling), finished
--        ("" unless completed or cancelled), result (nil unless completed)}.
-- The finished items (SPEC 3, History) are the hashes `{ns}:hist:<id>`,
-- newest first: those that finished less than the retention's age ago, at
-- most its count.
-- Every state is walked from the offset in its own order: the ready lanes
-- by rank (claim order), then the held lanes of their lane flow by flow
-- (sorted names, each by rank; SPEC 3, Flow limits), the sorted sets by
-- time (delayed, pending), the dead list (newest first), the parked lists
-- flow by flow (sorted names).
local op = ARGV[2]
local now = clock_view()
local FIELDS = { 'flow', 'payload', 'enq', 'nb', 'dlv', 'st', 'ca', 'owner', 'reason', 'failed', 'pri', 'cost',
  'hl', 'cx', 'fin', 'res' }
local finished = false
local function fetch(id)
  if finished then return redis.call('HMGET', hist_key(id), unpack(FIELDS)) end
  return redis.call('HMGET', item_key(id), unpack(FIELDS))
end
-- The members of `state`'s history index shown under retention `ret`,
-- positions [a, b] (newest first).
local function shown_range(state, ret, a, b)
  local count, age = retention(ret)
  if count <= 0 or age <= 0 or a >= count then return {} end
  b = math.min(b, count - 1)
  return redis.call('ZREVRANGEBYSCORE', history_zset(state), '+inf', '(' .. fmt(now - age),
    'LIMIT', a, b - a + 1)
end
local function row(id, f, held)
  local h = '0'
  if held then h = '1' end
  -- A pending item's last touch is its score in the pending set.
  local touched = ''
  if f[6] == 'pending' then touched = redis.call('ZSCORE', K_PENDING, pad(id)) or '' end
  local cx = '0'
  if f[6] == 'pending' and f[14] then cx = '1' end
  local res = false
  if f[6] == 'completed' then res = f[16] or '' end
  return { id, f[1] or '', f[2], f[3] or '0', f[4] or '', f[5] or '0', f[6] or '',
    f[7] or '', f[8] or '', f[9] or '', f[10] or '', f[11] or '0', f[12] or '1', h, touched, cx,
    f[15] or '', res }
end

if op == 'find' then
  local id = ARGV[3]
  local f = fetch(id)
  if not f[2] then
    -- SPEC 3, History: a finished item, while reads show it.
    finished = true
    f = fetch(id)
    if not f[2] then return {} end
    local state = f[6]
    local ret = ARGV[4]
    if state == 'cancelled' then ret = ARGV[5] end
    local count, age = retention(ret)
    local fin = tonumber(f[15] or '') or 0
    if count <= 0 or fin <= now - age then return {} end
    local rank = redis.call('ZREVRANK', history_zset(state), pad(id))
    if not rank or rank >= count then return {} end
    return { row(id, f, false) }
  end
  -- `hl` marks an item in its flow's held lane (set by lim_hold).
  return { row(id, f, (f[6] == 'backlog' or f[6] == 'due') and f[13] == '1') }
end

local state = ARGV[3]
local offset = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local limit = tonumber(ARGV[6])
local needle = ARGV[7]
local out = {}
local looked = 0
local function full() return #out >= limit or looked >= budget end
local function offer(id, held)
  looked = looked + 1
  local f = fetch(id)
  if not f[2] then return end
  if needle ~= '' and not string.find(f[2], needle, 1, true) then return end
  out[#out + 1] = row(id, f, held)
end
local function chunk() return math.max(1, math.min(200, budget - looked)) end

-- Positions [at, at + n) of a ranked key through `read` from position
-- `from` (default the offset), each member made an id by `id_of`; returns
-- 1 when the key ran out.
local function walk_ranked(read, id_of, from)
  local at = from or offset
  while not full() do
    local n = chunk()
    local members = read(at, at + n - 1)
    for _, m in ipairs(members) do
      local id = id_of(m)
      if id then offer(id) else looked = looked + 1 end
      at = at + 1
    end
    if #members < n then return 1 end
  end
  return 0
end
local function same(m) return m end

-- The held lanes `li` (0 due, 1 backlog) of every flow with a limit record,
-- by flow name, each by rank, from position `skip` of them all; returns 1
-- when they ran out.
local function walk_held(li, skip)
  if not any_limits() then return 1 end
  local flows = redis.call('SMEMBERS', K_LIMITS)
  table.sort(flows)
  for _, flow in ipairs(flows) do
    local key = held_key(flow, li)
    local len = redis.call('ZCARD', key)
    if skip >= len then
      skip = skip - len
    else
      local at = skip
      skip = 0
      while at < len and not full() do
        local n = chunk()
        local members = redis.call('ZRANGE', key, at, at + n - 1)
        if #members == 0 then break end
        for _, m in ipairs(members) do
          local id = member_id(m)
          if id then offer(id, true) else looked = looked + 1 end
          at = at + 1
        end
      end
      if full() then return 0 end
    end
  end
  return 1
end

-- A ready lane: the shared sorted set `zset`, then the held lanes `li`;
-- an offset past the shared lane skips it whole (ZCARD).
local function walk_ready(zset, li)
  local len = redis.call('ZCARD', zset)
  if offset < len then
    local e = walk_ranked(function(a, b) return redis.call('ZRANGE', zset, a, b) end, member_id)
    if e == 0 then return 0 end
    if full() then return 0 end
    return walk_held(li, 0)
  end
  return walk_held(li, offset - len)
end

local ended = 0
if state == 'backlog' then
  ended = walk_ready(K_READY, 1)
elseif state == 'due' then
  ended = walk_ready(K_READY_DUE, 0)
elseif state == 'delayed' then
  ended = walk_ranked(function(a, b) return redis.call('ZRANGE', K_DELAYED, a, b) end, unpad)
elseif state == 'pending' then
  ended = walk_ranked(function(a, b) return redis.call('ZRANGE', K_PENDING, a, b) end, unpad)
elseif state == 'dead_letter' then
  ended = walk_ranked(function(a, b) return redis.call('LRANGE', K_DEAD, a, b) end, same)
elseif state == 'completed' or state == 'cancelled' then
  finished = true
  ended = walk_ranked(function(a, b) return shown_range(state, ARGV[8], a, b) end, unpad)
elseif state == 'parked' then
  local flows = redis.call('SMEMBERS', K_FLOWS)
  table.sort(flows)
  local skip = offset
  ended = 1
  for _, flow in ipairs(flows) do
    local key = parked_key(flow)
    local len = redis.call('LLEN', key)
    if skip >= len then
      skip = skip - len
    else
      local at = skip
      skip = 0
      while at < len and not full() do
        local n = chunk()
        local ids = redis.call('LRANGE', key, at, at + n - 1)
        if #ids == 0 then break end
        for _, id in ipairs(ids) do
          offer(id)
          at = at + 1
        end
      end
      if full() then
        ended = 0
        break
      end
    end
  end
end
return { ended, looked, out }
