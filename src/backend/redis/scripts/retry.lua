-- retry. ARGV: now, id, lease, not_before, max_deliveries, dead_letter_cap,
-- result_ttl.
-- Returns {LOST}, {DELAYED}, or {DEAD_LETTERED, dropped}.
local now = clock_now()
local id, lease, nb = ARGV[2], ARGV[3], ARGV[4]
if not current(id, lease) then return { LOST } end
release(id, now)
local dlv = tonumber(redis.call('HGET', item_key(id), 'dlv') or '0')
if dlv >= tonumber(ARGV[5]) then
  return { DEAD_LETTERED, bury(id, MAX_DELIVERIES_REASON, now, tonumber(ARGV[6]), ARGV[7]) }
end
redis.call('HSET', item_key(id), 'nb', nb, 'st', 'delayed')
redis.call('HDEL', item_key(id), 'lane')
redis.call('ZADD', K_DELAYED, nb, pad(id))
wake()
return { DELAYED }
