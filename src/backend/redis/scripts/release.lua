-- release: give a claim back without spending its delivery. ARGV: now,
-- id, lease, not_before. Returns -1 lost, 1 delayed, 2 parked (paused flow).
local now = clock_now()
local id, lease, nb = ARGV[2], ARGV[3], ARGV[4]
if not current(id, lease) then return LOST end
release(id, now)
local k = item_key(id)
local dlv = tonumber(redis.call('HGET', k, 'dlv') or '0') or 0
if dlv > 0 then redis.call('HSET', k, 'dlv', fmt(dlv - 1)) end
local flow = redis.call('HGET', k, 'flow') or ''
if flow ~= '' and redis.call('SISMEMBER', K_PAUSED, flow) == 1 then
  park_item(id, flow)
  return 2
end
redis.call('HSET', k, 'nb', nb, 'st', 'delayed')
redis.call('HDEL', k, 'lane')
redis.call('ZADD', K_DELAYED, nb, pad(id))
wake()
return 1
