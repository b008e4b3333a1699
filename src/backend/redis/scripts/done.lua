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
if #old > 0 then redis.call('ZREM', K_DONE_EXP, unpack(old)) end
-- The sorted set alone holds a marker: its score is when it expires.
redis.call('ZADD', K_DONE_EXP, now + tonumber(ARGV[5]), field)
return 1
