-- SPEC 3, Cancelling: the holder's side of a cancel mark. ARGV: now, op.
-- end (ARGV[3] result_ttl, ARGV[4] the cancelled retention
--   `<count>:<age ms>:<slack>`, then id, lease pairs): end each item that is
--   pending under that lease with the mark `cx` (its holder's call was
--   answered as lost): out of pending, gone, its outcome `cancelled`.
--   Returns the ids ended.
-- look (then ids): the ids that are pending and marked, and the events
--   stream's tail, after which `wait_cancelled` waits for a mark.
local now = clock_now()
local op = ARGV[2]
if op == 'look' then
  local marked = {}
  for i = 3, #ARGV do
    local f = redis.call('HMGET', item_key(ARGV[i]), 'st', 'cx')
    if f[1] == 'pending' and f[2] then marked[#marked + 1] = ARGV[i] end
  end
  return { marked, events_tail() }
end
local ended = {}
for i = 5, #ARGV - 1, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', item_key(id), 'st', 'ls', 'cx')
  if f[1] == 'pending' and f[3] and f[2] and tonumber(f[2]) == tonumber(lease) then
    end_cancelled(id, now, ARGV[4])
    ended[#ended + 1] = { id, '' }
  end
end
if #ended > 0 then
  prune_outcomes(now)
  finish_all(ended, 'cancelled', now, ARGV[3])
end
local ids = {}
for _, e in ipairs(ended) do ids[#ids + 1] = e[1] end
return ids
