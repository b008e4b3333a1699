-- add / add_batch / add_delayed, all or none.
-- ARGV: now, dedup_window_ms, max_backlog ("" = none), then per item seven
-- values: flow, payload, has_key ("1"/"0"), key, not_before ("" = backlog),
-- priority tier, boost (tier x aging_step in ms: SPEC 3, Priority).
-- Returns {"full", limit} or {"ok", {id, duplicate(0/1)}...}.
local now = clock_now()
local window = tonumber(ARGV[2])
local limit = ARGV[3]

-- Forget dedup keys whose window ended.
local old = redis.call('ZRANGEBYSCORE', K_DEDUP_EXP, '-inf', now, 'LIMIT', 0, PRUNE_LIMIT)
for _, key in ipairs(old) do
  redis.call('HDEL', K_DEDUP, key)
  redis.call('ZREM', K_DEDUP_EXP, key)
end

local function known(key)
  local exp = redis.call('ZSCORE', K_DEDUP_EXP, key)
  if exp and tonumber(exp) > now then return redis.call('HGET', K_DEDUP, key) end
  return nil
end

local n = (#ARGV - 3) / 7
local fresh = 0
local seen = {}
for i = 0, n - 1 do
  local b = 4 + i * 7
  if ARGV[b + 2] == '1' then
    local key = ARGV[b + 3]
    -- A key earlier in the batch is live only while its window is open:
    -- never with a window of 0 (deduplication off).
    if not (seen[key] and window > 0) and not known(key) then
      seen[key] = true
      fresh = fresh + 1
    end
  else
    fresh = fresh + 1
  end
end

-- An add that journals nothing (only duplicates) is never full.
if limit ~= '' and fresh > 0 then
  local waiting = redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_READY_DUE)
    + redis.call('ZCARD', K_DELAYED)
  if waiting + fresh > tonumber(limit) then return { 'full', limit } end
end

local out = {}
for i = 0, n - 1 do
  local b = 4 + i * 7
  local flow, payload, has_key, key, nb = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local pri, boost = ARGV[b + 5], ARGV[b + 6]
  local first = nil
  if has_key == '1' then first = known(key) end
  if first then
    out[#out + 1] = { first, 1 }
  else
    local id = fmt(redis.call('INCR', K_SEQ))
    local k = item_key(id)
    redis.call('HSET', k, 'flow', flow, 'payload', payload, 'enq', fmt(now), 'dlv', 0)
    if pri ~= '0' then redis.call('HSET', k, 'pri', pri, 'boost', boost) end
    if nb ~= '' then
      redis.call('HSET', k, 'nb', nb, 'st', 'delayed')
      redis.call('ZADD', K_DELAYED, nb, pad(id))
    else
      to_backlog(id, now)
    end
    if has_key == '1' then
      redis.call('HSET', K_DEDUP, key, id)
      redis.call('ZADD', K_DEDUP_EXP, now + window, key)
    end
    out[#out + 1] = { id, 0 }
  end
end
if fresh > 0 then wake() end
return { 'ok', out }
