-- Store and forward (SPEC section 11): take a batch from one origin's
-- local journal, exactly once, all or none.
-- ARGV: now, origin, journal, dedup_window_ms, max_backlog ("" = none),
-- then per item eleven values: origin_id, late ("1"/"0"), flow, payload,
-- has_key, key, not_before ("" = backlog), enqueued_at, priority tier,
-- boost (tier x aging_step in ms: SPEC 3, Priority), cost in rate-limit
-- permits (SPEC 3, Flow limits).
-- The origin's record {ns}:forward:<origin> (hash: journal, mark, taken)
-- says which local ids it already took: every normal id at or below
-- `mark`, and the late ids in the set {ns}:forward:late:<origin>. Taken
-- ids are skipped, so a batch sent again journals nothing twice.
-- Returns {"journal", stored} when another journal forwards under this
-- origin name, {"full", limit}, or {"ok", mark, added, duplicates, skipped}.
local now = clock_now()
local origin, journal = ARGV[2], ARGV[3]
local window = tonumber(ARGV[4])
local limit = ARGV[5]
local K_ORIGIN = P .. 'forward:' .. origin
local K_LATE = P .. 'forward:late:' .. origin

local stored = redis.call('HGET', K_ORIGIN, 'journal')
if stored and stored ~= journal then return { 'journal', stored } end
local mark = tonumber(redis.call('HGET', K_ORIGIN, 'mark') or '0')

prune_dedup(now)

-- The items not taken before, in batch (local id) order.
local n = (#ARGV - 5) / 11
local todo = {}
local keys = {}
local top = mark
local skipped = 0
for i = 0, n - 1 do
  local b = 6 + i * 11
  local oid, late = ARGV[b], ARGV[b + 1]
  local taken
  if late == '1' then
    taken = redis.call('SISMEMBER', K_LATE, oid) == 1
  else
    taken = tonumber(oid) <= mark
    if tonumber(oid) > top then top = tonumber(oid) end
  end
  if taken then
    skipped = skipped + 1
  else
    todo[#todo + 1] = b
    keys[#keys + 1] = { ARGV[b + 4], ARGV[b + 5] }
  end
end

local fresh = count_fresh(keys, now, window)
if over_capacity(limit, fresh) then return { 'full', limit } end

adds_begin(now)
local added, dups = 0, 0
for _, b in ipairs(todo) do
  local oid, late, flow, payload = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local has_key, key, nb, enq = ARGV[b + 4], ARGV[b + 5], ARGV[b + 6], ARGV[b + 7]
  local pri, boost, cost = ARGV[b + 8], ARGV[b + 9], ARGV[b + 10]
  if has_key == '1' and dedup_known(key, now) then
    dups = dups + 1
  else
    local id = new_item(flow, payload, enq, nb, pri, boost, has_key, key, now, window, cost)
    redis.call('HSET', item_key(id), 'origin', origin, 'oid', oid)
    added = added + 1
  end
  if late == '1' then redis.call('SADD', K_LATE, oid) end
end
adds_end()
redis.call('HSET', K_ORIGIN, 'journal', journal, 'mark', fmt(top))
redis.call('HINCRBY', K_ORIGIN, 'taken', added + dups)
if added > 0 then wake() end
return { 'ok', fmt(top), added, dups, skipped }
