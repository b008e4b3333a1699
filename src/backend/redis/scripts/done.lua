-- mark_done / was_done. ARGV: now, "mark"/"check", id, step, ttl_ms.
-- Returns 1/0 for check, 1 for mark.
local now = clock_now()
local field = ARGV[3] .. ':' .. ARGV[4]
if ARGV[2] == 'check' then
  local exp = redis.call('ZSCORE', K_DONE_EXP, field)
  if exp and tonumber(exp) > now then return 1 end
  return 0
end
local old = redis.call('ZRANGEBYSCORE', K_DONE_EXP, '-inf', now, 'LIMIT', 0, PRUNE_LIMIT)
for _, f in ipairs(old) do
  redis.call('HDEL', K_DONE, f)
  redis.call('ZREM', K_DONE_EXP, f)
end
local exp = now + tonumber(ARGV[5])
redis.call('HSET', K_DONE, field, fmt(exp))
redis.call('ZADD', K_DONE_EXP, exp, field)
return 1
