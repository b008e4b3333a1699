-- clear_flow. ARGV: now (unused), flow. Returns how many items were deleted.
local flow = ARGV[2]
redis.call('SREM', K_PAUSED, flow)
local ids = redis.call('LRANGE', parked_key(flow), 0, -1)
for _, id in ipairs(ids) do redis.call('DEL', item_key(id), prog_key(id), chunks_key(id)) end
redis.call('DEL', parked_key(flow))
redis.call('SREM', K_FLOWS, flow)
return #ids
