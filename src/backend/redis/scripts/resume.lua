-- resume. ARGV: now, flow. Returns how many moved to the backlog.
local now = clock_now()
local flow = ARGV[2]
redis.call('SREM', K_PAUSED, flow)
local ids = redis.call('LRANGE', parked_key(flow), 0, -1)
for _, id in ipairs(ids) do to_backlog(id, now) end
redis.call('DEL', parked_key(flow))
redis.call('SREM', K_FLOWS, flow)
if #ids > 0 then wake() end
return #ids
