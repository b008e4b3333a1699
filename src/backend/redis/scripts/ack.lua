-- ack / ack_batch. ARGV: now (unused), then id, lease pairs.
-- Returns how many were acked (lost receipts, and repeats of one receipt,
-- are skipped). Per item one HMGET; the rest is written once per call.
-- Only an acked id is marked seen: a lost receipt of an item (from before a
-- retry or reclaim) must not hide its current receipt later in the batch.
local n, seen = 0, {}
local zrem, dels = {}, {}
for i = 2, #ARGV - 1, 2 do
  local id, lease = ARGV[i], ARGV[i + 1]
  if not seen[id] then
    local f = redis.call('HMGET', item_key(id), 'st', 'ls')
    if f[1] == 'pending' and f[2] and tonumber(f[2]) == tonumber(lease) then
      seen[id] = true
      zrem[#zrem + 1] = pad(id)
      dels[#dels + 1] = item_key(id)
      n = n + 1
    end
  end
end
if n > 0 then
  call_chunked('ZREM', K_PENDING, zrem)
  local i = 1
  while i <= #dels do
    local last = math.min(i + 999, #dels)
    redis.call('DEL', unpack(dels, i, last))
    i = last + 1
  end
end
return n
