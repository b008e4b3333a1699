-- park. ARGV: now, id, lease. Returns -1 lost, -2 default flow, 1 parked.
local id, lease = ARGV[2], ARGV[3]
if not current(id, lease) then return -1 end
local flow = redis.call('HGET', item_key(id), 'flow') or ''
if flow == '' then return -2 end
release(id)
park_item(id, flow)
return 1
