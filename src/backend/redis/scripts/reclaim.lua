-- reclaim. ARGV: now, consumer, min_idle_ms, count, max_deliveries,
-- dead_letter_cap, result_ttl, the cancelled retention `<count>:<age ms>:<slack>`
-- (SPEC 3, History). Oldest claim first by (claimed_at, id): the pending set's
-- score is claimed_at and its members are padded ids, so its order is
-- exactly that, and every stale item is reached however many fresh ones
-- there are. An item of a paused flow is parked (deliveries unchanged) and
-- not counted. An item marked cancelled (`cx`, SPEC 3, Cancelling) ends
-- as cancelled, not counted. Returns {items, missing, dropped, dead,
-- cancelled}, where dead and cancelled list id, deliveries, lease of each
-- stale claim dead-lettered or ended instead.
local now = clock_now()
local consumer = ARGV[2]
local cutoff = now - tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local max = tonumber(ARGV[5])
local cap = tonumber(ARGV[6])
local ttl = ARGV[7]
local paused = {}
for _, f in ipairs(redis.call('SMEMBERS', K_PAUSED)) do paused[f] = true end
-- Phase 1 (no writes): choose, in order, the items to bury and to take.
local plan, taking, missing, offset = {}, 0, 0, 0
while taking < count do
  local page = redis.call('ZRANGEBYSCORE', K_PENDING, '-inf', cutoff, 'LIMIT', offset, 200)
  if #page == 0 then break end
  offset = offset + #page
  for _, m in ipairs(page) do
    if taking >= count then break end
    local id = unpad(m)
    local f = redis.call('HMGET', item_key(id), 'dlv', 'flow', 'cx')
    local dlv, flow = f[1], f[2] or ''
    if not dlv then
      plan[#plan + 1] = { id, 'missing', m }
    elseif f[3] then
      plan[#plan + 1] = { id, 'cancel' }
    elseif tonumber(dlv) >= max then
      plan[#plan + 1] = { id, 'bury' }
    elseif paused[flow] then
      plan[#plan + 1] = { id, 'park', flow }
    else
      plan[#plan + 1] = { id, 'take' }
      taking = taking + 1
    end
  end
end
-- Phase 2: apply.
local out, dropped, dead, cancelled, ended = {}, 0, {}, {}, {}
hand_outs_begin(now, consumer)
for _, p in ipairs(plan) do
  local id, what = p[1], p[2]
  if what == 'missing' then
    redis.call('ZREM', K_PENDING, p[3])
    redis.call('HDEL', K_LEASES, id)
    missing = missing + 1
  elseif what == 'bury' then
    local f = redis.call('HMGET', item_key(id), 'dlv', 'ls')
    dead[#dead + 1] = id
    dead[#dead + 1] = f[1] or '0'
    dead[#dead + 1] = f[2] or '0'
    release(id, now)
    dropped = dropped + bury(id, MAX_DELIVERIES_REASON, now, cap, ttl)
  elseif what == 'cancel' then
    local f = redis.call('HMGET', item_key(id), 'dlv', 'ls')
    cancelled[#cancelled + 1] = id
    cancelled[#cancelled + 1] = f[1] or '0'
    cancelled[#cancelled + 1] = f[2] or '0'
    end_cancelled(id, now, ARGV[8])
    ended[#ended + 1] = { id, '' }
  elseif what == 'park' then
    release(id, now)
    park_item(id, p[3])
  else
    local lane = redis.call('HGET', item_key(id), 'lane')
    release(id, now)
    out[#out + 1] = hand_out(id, lane or 'backlog')
  end
end
hand_outs_end()
if #ended > 0 then
  prune_outcomes(now)
  finish_all(ended, 'cancelled', now, ttl)
end
if missing > 0 then
  redis.log(redis.LOG_WARNING, 'workjournal: ' .. missing .. ' pending ids without an item record in ' .. P)
end
return { out, missing, dropped, dead, cancelled }
