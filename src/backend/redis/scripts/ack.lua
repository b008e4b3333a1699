-- ack / ack_batch / ack_with_result. ARGV: now, result_ttl, the completed
-- retention `<count>:<age ms>:<slack>` (SPEC 3, History), then id, lease, result
-- triples. Returns how many were acked (lost receipts, and repeats
-- of one receipt, are skipped).
-- The receipts are checked against the leases index with one HMGET for
-- the whole call; only an id missing from it (an item handed out before
-- the index existed) reads its item hash. The item hash is read per acked
-- item only while some flow has limits (its flow's record counts the ack).
-- Only an acked id is marked seen: a lost receipt of an item (from before a
-- retry or reclaim) must not hide its current receipt later in the batch.
local n, seen = 0, {}
local zrem, dels, acked, results = {}, {}, {}, {}
local ids = {}
for i = 4, #ARGV - 2, 3 do ids[#ids + 1] = ARGV[i] end
local held = {}
local i = 1
while i <= #ids do
  local last = math.min(i + 999, #ids)
  local part = redis.call('HMGET', K_LEASES, unpack(ids, i, last))
  for j = 1, #part do held[i + j - 1] = part[j] end
  i = last + 1
end
for k = 1, #ids do
  local id, lease = ids[k], ARGV[k * 3 + 2]
  if not seen[id] then
    local ls = held[k]
    local ok
    if ls then
      ok = tonumber(ls) == tonumber(lease)
    else
      ok = current(id, lease)
    end
    if ok then
      seen[id] = true
      local padded = pad(id)
      zrem[#zrem + 1] = padded
      dels[#dels + 1] = item_key(id)
      acked[#acked + 1] = id
      results[#results + 1] = { id, ARGV[k * 3 + 3], padded }
      n = n + 1
    end
  end
end
if n > 0 then
  local now = clock_now()
  -- SPEC 3, Flow limits: each ack frees its flow's slot; the acks of one
  -- flow are counted off its record at once.
  if any_limits() then
    local flows, acked_of = {}, {}
    for _, id in ipairs(acked) do
      local flow = redis.call('HGET', item_key(id), 'flow')
      if flow and flow ~= '' then
        if not acked_of[flow] then
          acked_of[flow] = 0
          flows[#flows + 1] = flow
        end
        acked_of[flow] = acked_of[flow] + 1
      end
    end
    for _, flow in ipairs(flows) do lim_pending(flow, -acked_of[flow], now) end
  end
  call_chunked('ZREM', K_PENDING, zrem)
  call_chunked('HDEL', K_LEASES, acked)
  -- SPEC 3, History: the newest `count` acked items (the highest ids:
  -- they all finish now) are kept before the rest go.
  -- The kept hash keeps its claim time `ca` (the last delivery's); its
  -- lease fields stay as the claim left them, unread.
  local hc, ha, hs = retention(ARGV[3])
  local added = 0
  if hc > 0 and ha > 0 then
    local order = {}
    for j, _ in ipairs(results) do order[j] = j end
    if #order > hc then
      table.sort(order, function(a, b) return tonumber(results[a][1]) < tonumber(results[b][1]) end)
    end
    local index = {}
    local at = fmt(now)
    for j = math.max(1, #order - hc + 1), #order do
      local r = results[order[j]]
      if keep_finished(r[1], 'completed', r[2], now) then
        index[#index + 1] = at
        index[#index + 1] = r[3]
      end
    end
    call_chunked('ZADD', history_zset('completed'), index)
    added = #index / 2
  end
  trim_history('completed', now, hc, ha, hs, added)
  del_chunked(dels)
  prune_outcomes(now)
  finish_all(results, 'done', now, ARGV[2])
end
return n
