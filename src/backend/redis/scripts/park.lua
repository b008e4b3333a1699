-- park. ARGV: now, id, lease. Returns LOST, DEFAULT_FLOW or PARKED.
local now = clock_now()
local id, lease = ARGV[2], ARGV[3]
if not current(id, lease) then return LOST end
local flow = redis.call('HGET', item_key(id), 'flow') or ''
if flow == '' then return DEFAULT_FLOW end
release(id, now)
park_item(id, flow)
return PARKED
