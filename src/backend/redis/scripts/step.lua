-- step. ARGV: now, consumer, flow. Returns {} or {item}.
local now = clock_now()
local flow = ARGV[3]
local id = redis.call('LPOP', parked_key(flow))
if redis.call('LLEN', parked_key(flow)) == 0 then redis.call('SREM', K_FLOWS, flow) end
if not id then return {} end
if redis.call('EXISTS', item_key(id)) == 0 then
  redis.log(redis.LOG_WARNING, 'workjournal: parked id ' .. id .. ' without an item record in ' .. P)
  return {}
end
hand_outs_begin(now, ARGV[2])
local got = hand_out(id, 'parked')
hand_outs_end()
return { got }
