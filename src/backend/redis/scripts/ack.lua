-- ack / ack_batch / ack_with_result. ARGV: now, result_ttl, then id, lease,
-- result triples. Returns how many were acked (lost receipts, and repeats
-- of one receipt, are skipped). Per item one HMGET; the rest is written once
-- per call, apart from each item's outcome (SPEC 3, Outcomes and progress).
-- Only an acked id is marked seen: a lost receipt of an item (from before a
-- retry or reclaim) must not hide its current receipt later in the batch.
local n, seen = 0, {}
local zrem, dels, results = {}, {}, {}
for i = 3, #ARGV - 2, 3 do
  local id, lease = ARGV[i], ARGV[i + 1]
  if not seen[id] then
    local f = redis.call('HMGET', item_key(id), 'st', 'ls')
    if f[1] == 'pending' and f[2] and tonumber(f[2]) == tonumber(lease) then
      seen[id] = true
      zrem[#zrem + 1] = pad(id)
      dels[#dels + 1] = item_key(id)
      results[#results + 1] = { id, ARGV[i + 2] }
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
  local now = clock_now()
  prune_outcomes(now)
  for _, r in ipairs(results) do finish(r[1], 'done', r[2], now, ARGV[2]) end
end
return n
