-- SPEC 12.1, read only. ARGV: now (unused), op, then
--   list: state, offset, budget, limit, needle ("" for none);
--         returns {ended (0/1), looked, {row...}}
--   find: id; returns {row} or {}
-- row = {id, flow, payload, enq, nb, dlv, st, ca, owner, reason, failed, pri, cost}.
-- Every state is walked from the offset in its own order: the ready lanes
-- by rank (claim order), the sorted sets by time (delayed, pending), the
-- dead list (newest first), the parked lists flow by flow (sorted names).
local op = ARGV[2]
local FIELDS = { 'flow', 'payload', 'enq', 'nb', 'dlv', 'st', 'ca', 'owner', 'reason', 'failed', 'pri', 'cost' }
local function fetch(id) return redis.call('HMGET', item_key(id), unpack(FIELDS)) end
local function row(id, f)
  return { id, f[1] or '', f[2], f[3] or '0', f[4] or '', f[5] or '0', f[6] or '',
    f[7] or '', f[8] or '', f[9] or '', f[10] or '', f[11] or '0', f[12] or '1' }
end

if op == 'find' then
  local id = ARGV[3]
  local f = fetch(id)
  if not f[2] then return {} end
  return { row(id, f) }
end

local state = ARGV[3]
local offset = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local limit = tonumber(ARGV[6])
local needle = ARGV[7]
local out = {}
local looked = 0
local function full() return #out >= limit or looked >= budget end
local function offer(id)
  looked = looked + 1
  local f = fetch(id)
  if not f[2] then return end
  if needle ~= '' and not string.find(f[2], needle, 1, true) then return end
  out[#out + 1] = row(id, f)
end
local function chunk() return math.max(1, math.min(200, budget - looked)) end

-- Positions [at, at + n) of a ranked key through `read`, each member made
-- an id by `id_of`; returns 1 when the key ran out.
local function walk_ranked(read, id_of)
  local at = offset
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

local ended = 0
if state == 'backlog' then
  ended = walk_ranked(function(a, b) return redis.call('ZRANGE', K_READY, a, b) end, member_id)
elseif state == 'due' then
  ended = walk_ranked(function(a, b) return redis.call('ZRANGE', K_READY_DUE, a, b) end, member_id)
elseif state == 'delayed' then
  ended = walk_ranked(function(a, b) return redis.call('ZRANGE', K_DELAYED, a, b) end, unpad)
elseif state == 'pending' then
  ended = walk_ranked(function(a, b) return redis.call('ZRANGE', K_PENDING, a, b) end, unpad)
elseif state == 'dead_letter' then
  ended = walk_ranked(function(a, b) return redis.call('LRANGE', K_DEAD, a, b) end, same)
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
