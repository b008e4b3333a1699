-- claim: promote due timers, then take up to `count` items, due lane first,
-- then the backlog; items of paused flows are parked and not counted.
-- ARGV: now, consumer, count, from ("all"/"due").
-- Returns {items, missing, parked, wake_tail, next_due, now}.
local now = clock_now()
local consumer = ARGV[2]
local count = tonumber(ARGV[3])
promote(now)
local lanes = { { K_DUE, 'due' } }
if ARGV[4] == 'all' then lanes[2] = { K_BACKLOG, 'backlog' } end
local out, missing, parked = {}, 0, 0
for _, lane in ipairs(lanes) do
  local stream, name = lane[1], lane[2]
  while #out < count do
    local r = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', count - #out,
      'STREAMS', stream, '>')
    if not r or not r[1] or #r[1][2] == 0 then break end
    for _, e in ipairs(r[1][2]) do
      local sid = e[1]
      local id = entry_field(e[2], 'id')
      local flow = id and redis.call('HGET', item_key(id), 'flow')
      if not flow then
        -- An entry whose item record was deleted behind the queue's back.
        redis.call('XACK', stream, GROUP, sid)
        redis.call('XDEL', stream, sid)
        missing = missing + 1
      elseif flow ~= '' and redis.call('SISMEMBER', K_PAUSED, flow) == 1 then
        redis.call('XACK', stream, GROUP, sid)
        redis.call('XDEL', stream, sid)
        park_item(id, flow)
        parked = parked + 1
      else
        out[#out + 1] = hand_out(id, name, sid, now, consumer)
      end
    end
  end
end
if missing > 0 then
  redis.log(redis.LOG_WARNING, 'workjournal: ' .. missing .. ' stream entries without an item record in ' .. P)
end
return { out, missing, parked, wake_tail(), next_due(), fmt(now) }
