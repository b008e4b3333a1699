-- ack / ack_batch / ack_with_result. ARGV: now, result_ttl, then id, lease,
-- result triples. Returns how many were acked (lost receipts, and repeats
-- of one receipt, are skipped). Per item one HMGET; the rest is written once
-- per call, apart from one HSET per item's outcome (SPEC 3, Outcomes and
-- progress), and each limited flow's record once.
-- Only an acked id is marked seen: a lost receipt of an item (from before a
-- retry or reclaim) must not hide its current receipt later in the batch.
local n, seen = 0, {}
local zrem, dels, results, flows, acked_of = {}, {}, {}, {}, {}
for i = 3, #ARGV - 2, 3 do
  local id, lease = ARGV[i], ARGV[i + 1]
  if not seen[id] then
    local f = redis.call('HMGET', item_key(id), 'st', 'ls', 'flow')
    if f[1] == 'pending' and f[2] and tonumber(f[2]) == tonumber(lease) then
      seen[id] = true
      local flow = f[3]
      if flow and flow ~= '' then
        if not acked_of[flow] then
          acked_of[flow] = 0
          flows[#flows + 1] = flow
        end
        acked_of[flow] = acked_of[flow] + 1
      end
      zrem[#zrem + 1] = pad(id)
      dels[#dels + 1] = item_key(id)
      results[#results + 1] = { id, ARGV[i + 2] }
      n = n + 1
    end
  end
end
if n > 0 then
  call_chunked('ZREM', K_PENDING, zrem)
  del_chunked(dels)
  local now = clock_now()
  -- SPEC 3, Flow limits: each ack frees its flow's slot; the acks of one
  -- flow are counted off its record at once.
  if any_limits() then
    for _, flow in ipairs(flows) do lim_pending(flow, -acked_of[flow], now) end
  end
  prune_outcomes(now)
  finish_all(results, 'done', now, ARGV[2])
end
return n
