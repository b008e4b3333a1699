-- dead letters: list, redrive, purge. ARGV: now (redrive), op, arg.
-- list: arg = count; returns {{id, flow, payload, enq, nb, dlv, reason, failed, pri}...}
-- redrive: arg = id; returns 1 moved, 0 no such dead letter.
-- purge: returns how many were deleted.
local op = ARGV[2]
if op == 'list' then
  local n = tonumber(ARGV[3])
  local out = {}
  if n <= 0 then return out end
  for _, id in ipairs(redis.call('LRANGE', K_DEAD, 0, n - 1)) do
    local f = redis.call('HMGET', item_key(id), 'flow', 'payload', 'enq', 'nb', 'dlv', 'reason', 'failed', 'pri')
    if f[2] then
      out[#out + 1] = { id, f[1] or '', f[2], f[3] or '0', f[4] or '', f[5] or '0', f[6] or '', f[7] or '0', f[8] or '0' }
    end
  end
  return out
elseif op == 'redrive' then
  local id = ARGV[3]
  if redis.call('LREM', K_DEAD, 1, id) == 0 then return 0 end
  forget_outcome(id)
  redis.call('HSET', item_key(id), 'dlv', 0)
  redis.call('HDEL', item_key(id), 'nb', 'reason', 'failed')
  to_backlog(id, clock_now())
  wake()
  return 1
else
  local ids = redis.call('LRANGE', K_DEAD, 0, -1)
  for _, id in ipairs(ids) do redis.call('DEL', item_key(id)) end
  redis.call('DEL', K_DEAD)
  return #ids
end
