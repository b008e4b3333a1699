-- add / add_batch / add_delayed, all or none.
-- ARGV: now, dedup_window_ms, max_backlog ("" = none), then per item eight
-- values: flow, payload, has_key ("1"/"0"), key, not_before ("" = backlog),
-- priority tier, boost (tier x aging_step in ms: SPEC 3, Priority), cost
-- in rate-limit permits (SPEC 3, Flow limits).
-- Returns {"full", limit} or {"ok", {id, duplicate(0/1)}...}.
local now = clock_now()
local window = tonumber(ARGV[2])
local limit = ARGV[3]

prune_dedup(now)

local n = (#ARGV - 3) / 8
local keys = {}
for i = 0, n - 1 do
  local b = 4 + i * 8
  keys[#keys + 1] = { ARGV[b + 2], ARGV[b + 3] }
end
local fresh = count_fresh(keys, now, window)

-- An add that journals nothing (only duplicates) is never full.
if over_capacity(limit, fresh) then return { 'full', limit } end

adds_begin(now)
local out = {}
for i = 0, n - 1 do
  local b = 4 + i * 8
  local flow, payload, has_key, key, nb = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local pri, boost, cost = ARGV[b + 5], ARGV[b + 6], ARGV[b + 7]
  local first = nil
  if has_key == '1' then first = dedup_known(key, now) end
  if first then
    out[#out + 1] = { first, 1 }
  else
    out[#out + 1] = { new_item(flow, payload, fmt(now), nb, pri, boost, has_key, key, now, window, cost), 0 }
  end
end
adds_end()
if fresh > 0 then wake() end
return { 'ok', out }
