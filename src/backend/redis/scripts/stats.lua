-- stats. ARGV: now. Returns {backlog, due, pending, delayed, parked, dead,
-- oldest_claimed_at or "", now, dead letters dropped past the cap}.
local now = clock_now()
local due = redis.call('ZCARD', K_READY_DUE)
local backlog = redis.call('ZCARD', K_READY) + due
local parked = 0
for _, flow in ipairs(redis.call('SMEMBERS', K_FLOWS)) do
  parked = parked + redis.call('LLEN', parked_key(flow))
end
local oldest = redis.call('ZRANGE', K_PENDING, 0, 0, 'WITHSCORES')
return { backlog, due, redis.call('ZCARD', K_PENDING), redis.call('ZCARD', K_DELAYED),
  parked, redis.call('LLEN', K_DEAD), oldest[2] or '', fmt(now),
  tonumber(redis.call('GET', K_DEAD_DROPPED) or '0') or 0 }
