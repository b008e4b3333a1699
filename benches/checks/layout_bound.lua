-- The least a script can do per item for add_batch and claim + ack_batch
-- while keeping the Redis backend's promises, for `redis_script_cost`:
-- each item one packed value in one hash keyed by id (`items`), its lease
-- state another (`leases`), both read and written once per call for the
-- whole batch, no limits, no paused flows, no dedup keys (the benchmark's
-- case). Not the backend's layout: a measure of the floor under any layout.
-- KEYS[1]: the prefix "{ns}:". ARGV[1]: add | claim | ack; ARGV[2]: now in
-- ms; ARGV[3]: "1" keeps the pending index (visibility timeouts), ARGV[4]:
-- "1" keeps outcomes (SPEC 3); then the call's arguments.
local P = KEYS[1]
local op, now = ARGV[1], tonumber(ARGV[2])
local pending, outcomes = ARGV[3] == '1', ARGV[4] == '1'
local function pad(id) return string.format('%020d', id) end
local function fmt(n) return string.format('%d', n) end

-- What every call of the backend does first: observe the clock.
local high = tonumber(redis.call('GET', P .. 'clock') or '0') or 0
if now > high then redis.call('SET', P .. 'clock', fmt(now)) end

if op == 'add' then
  -- ARGV[5..]: payloads. Returns the first id.
  redis.call('ZRANGEBYSCORE', P .. 'dedup:exp', '-inf', now, 'LIMIT', 0, 100)
  redis.call('EXISTS', P .. 'limits')
  local seq = tonumber(redis.call('GET', P .. 'seq') or '0')
  local pos = tonumber(redis.call('GET', P .. 'pos') or '0')
  local last = tonumber(redis.call('HGET', P .. 'clocks', 'backlog') or '0')
  local rank = fmt(math.max(now, last))
  local head = fmt(now) .. ':0:0:1:'
  local first = seq + 1
  local items, ready = {}, {}
  for i = 5, #ARGV do
    seq = seq + 1
    pos = pos + 1
    local id = fmt(seq)
    items[#items + 1] = id
    items[#items + 1] = head .. ARGV[i]
    ready[#ready + 1] = rank
    ready[#ready + 1] = pad(pos) .. ':' .. id
  end
  redis.call('HSET', P .. 'items', unpack(items))
  redis.call('ZADD', P .. 'ready', unpack(ready))
  redis.call('SET', P .. 'seq', fmt(seq))
  redis.call('SET', P .. 'pos', fmt(pos))
  redis.call('HSET', P .. 'clocks', 'backlog', rank)
  redis.call('XADD', P .. 'wake', 'MAXLEN', '16', '*', 'w', '1')
  return first
elseif op == 'claim' then
  -- ARGV[5]: consumer, ARGV[6]: count. Returns {id, record, deliveries,
  -- lease} per item.
  redis.call('ZRANGEBYSCORE', P .. 'delayed', '-inf', now)
  redis.call('EXISTS', P .. 'limits')
  redis.call('SMEMBERS', P .. 'paused')
  local lease = tonumber(redis.call('GET', P .. 'lease') or '0')
  local r = redis.call('ZPOPMIN', P .. 'ready', tonumber(ARGV[6]))
  local ids = {}
  for i = 1, #r, 2 do ids[#ids + 1] = string.sub(r[i], 22) end
  if #ids == 0 then return {} end
  local recs = redis.call('HMGET', P .. 'items', unpack(ids))
  -- Deliveries of earlier leases (none for a new item).
  local dlvs = redis.call('HMGET', P .. 'dlv', unpack(ids))
  local snow = fmt(now)
  local tail = ':' .. snow .. ':backlog:' .. ARGV[5]
  local out, leases, zadd = {}, {}, {}
  for k, id in ipairs(ids) do
    lease = lease + 1
    local dlv = (tonumber(dlvs[k]) or 0) + 1
    leases[#leases + 1] = id
    leases[#leases + 1] = fmt(lease) .. ':' .. dlv .. tail
    zadd[#zadd + 1] = snow
    zadd[#zadd + 1] = pad(tonumber(id))
    out[#out + 1] = { id, recs[k] or '', dlv, lease }
  end
  redis.call('HSET', P .. 'leases', unpack(leases))
  if pending then redis.call('ZADD', P .. 'pending', unpack(zadd)) end
  redis.call('SET', P .. 'lease', fmt(lease))
  redis.call('XREVRANGE', P .. 'wake', '+', '-', 'COUNT', 1)
  redis.call('ZRANGE', P .. 'delayed', 0, 0, 'WITHSCORES')
  return out
elseif op == 'ack' then
  -- ARGV[5..]: id, lease pairs. Returns how many were acked.
  local ids, want = {}, {}
  for i = 5, #ARGV - 1, 2 do
    ids[#ids + 1] = ARGV[i]
    want[#want + 1] = tonumber(ARGV[i + 1])
  end
  local held = redis.call('HMGET', P .. 'leases', unpack(ids))
  local acked, zrem, outs, index, signal = {}, {}, {}, {}, {}
  local value = 'done:' .. fmt(now) .. ':'
  local exp = fmt(now + 3600000)
  for k, id in ipairs(ids) do
    local h = held[k]
    if h and tonumber(string.match(h, '^(%d+)')) == want[k] then
      local p = pad(tonumber(id))
      acked[#acked + 1] = id
      zrem[#zrem + 1] = p
      outs[#outs + 1] = id
      outs[#outs + 1] = value
      index[#index + 1] = exp
      index[#index + 1] = p
      signal[#signal + 1] = id
      signal[#signal + 1] = value
    end
  end
  if #acked == 0 then return 0 end
  if pending then redis.call('ZREM', P .. 'pending', unpack(zrem)) end
  redis.call('HDEL', P .. 'leases', unpack(acked))
  redis.call('HDEL', P .. 'items', unpack(acked))
  redis.call('HDEL', P .. 'dlv', unpack(acked))
  if outcomes then
    redis.call('ZRANGEBYSCORE', P .. 'out:exp', '-inf', now, 'LIMIT', 0, 100)
    redis.call('HSET', P .. 'out', unpack(outs))
    redis.call('ZADD', P .. 'out:exp', unpack(index))
    redis.call('XADD', P .. 'events', 'MAXLEN', '64', '*', unpack(signal))
  end
  return #acked
end
return redis.error_reply('layout_bound: unknown op ' .. tostring(op))
