-- ack / ack_batch. ARGV: now (unused), then id, lease pairs.
-- Returns how many were acked (lost receipts are skipped).
local n = 0
for i = 2, #ARGV - 1, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  if current(id, lease) then
    release(id)
    redis.call('DEL', item_key(id))
    n = n + 1
  end
end
return n
