-- claim: promote due timers, then take up to `count` items, due lane first,
-- then the backlog, each by rank (SPEC 3, Priority); items of paused flows
-- are parked and not counted.
-- ARGV: now, consumer, count, from ("all"/"due").
-- Returns {items, missing, parked, wake_tail, next_due, now}.
-- The hot path: per item one HMGET and one HSET; leases and the pending
-- index are written once per call.
local now = clock_now()
local consumer = ARGV[2]
local count = tonumber(ARGV[3])
promote(now)
local lanes = { { K_READY_DUE, 'due' } }
if ARGV[4] == 'all' then lanes[2] = { K_READY, 'backlog' } end
local paused = {}
for _, f in ipairs(redis.call('SMEMBERS', K_PAUSED)) do paused[f] = true end
local lease = tonumber(redis.call('GET', K_LEASE) or '0')
local out, missing, parked, zadd = {}, 0, 0, {}
local snow = fmt(now)
for _, lane in ipairs(lanes) do
  local zset, name = lane[1], lane[2]
  while #out < count do
    local r = redis.call('ZPOPMIN', zset, count - #out)
    if #r == 0 then break end
    for i = 1, #r, 2 do
      local id = member_id(r[i])
      local f = id and redis.call('HMGET', item_key(id), 'flow', 'payload', 'enq', 'nb', 'dlv', 'pri')
      if not f or not f[5] then
        -- A member whose item record was deleted behind the queue's back.
        missing = missing + 1
      elseif paused[f[1]] then
        park_item(id, f[1])
        parked = parked + 1
      else
        lease = lease + 1
        local dlv = tonumber(f[5]) + 1
        redis.call('HSET', item_key(id), 'dlv', dlv, 'st', 'pending', 'lane', name,
          'ls', fmt(lease), 'ca', snow, 'owner', consumer)
        zadd[#zadd + 1] = now
        zadd[#zadd + 1] = pad(id)
        out[#out + 1] = { id, f[1], f[2], f[3] or '0', f[4] or '', dlv, name, snow, lease, f[6] or '0' }
      end
    end
  end
end
if #out > 0 then
  redis.call('SET', K_LEASE, fmt(lease))
  call_chunked('ZADD', K_PENDING, zadd)
end
if missing > 0 then
  redis.log(redis.LOG_WARNING, 'workjournal: ' .. missing .. ' ready entries without an item record in ' .. P)
end
return { out, missing, parked, wake_tail(), next_due(), snow }
