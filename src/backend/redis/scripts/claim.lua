-- claim: promote due timers, then take up to `count` items, due lane first,
-- then the backlog, each by rank (SPEC 3, Priority); items of paused flows
-- are parked and not counted. Items of a flow whose limits hold it go to
-- the flow's held lane in their place; the heads of the held lanes of the
-- flows that may run are merged in by rank (SPEC 3, Flow limits), so no
-- claim walks a held flow's items to get past them.
-- ARGV: now, consumer, count, from ("all"/"due").
-- Returns {items, missing, parked, wake_tail, next_wake, now}.
-- The hot path (no limits): per item one HMGET and one HSET; leases and
-- the pending index are written once per call (`hand_out` in common.lua).
-- With limits, only the items of flows in the limits set (read once per
-- call) look at a limit record, and the shared lane is still taken with
-- one ZPOPMIN per run while no held flow may run.
local now = clock_now()
local consumer = ARGV[2]
local count = tonumber(ARGV[3])
promote(now)
local limited = any_limits()
-- The flows with a limit record: a claim creates none, so the set read
-- here holds every flow whose record this script can meet.
local limset = {}
if limited then
  lift_due(now)
  for _, f in ipairs(redis.call('SMEMBERS', K_LIMITS)) do limset[f] = true end
end
local lanes = { { K_READY_DUE, 'due', K_HEADS_DUE, 0 } }
if ARGV[4] == 'all' then lanes[2] = { K_READY, 'backlog', K_HEADS, 1 } end
local paused = {}
for _, f in ipairs(redis.call('SMEMBERS', K_PAUSED)) do paused[f] = true end
hand_outs_begin(now, consumer)
local out, missing, parked = {}, 0, 0
local snow = fmt(now)

-- `take` and `take_head` have counted the item in its flow's limits.
local function give(id, f, name)
  out[#out + 1] = hand_out(id, name, f, true)
end

-- A member taken from the shared lane (score `score`).
local function take(m, score, name, li)
  local id = member_id(m)
  local f = id and redis.call('HMGET', item_key(id), unpack(HAND_OUT_FIELDS))
  if not f or not f[5] then
    -- A member whose item record was deleted behind the queue's back.
    missing = missing + 1
    return
  end
  local flow = f[1]
  if flow and flow ~= '' and limset[flow] then
    local st = lim_get(flow)
    if st then
      local cost = tonumber(f[7] or '1') or 1
      local may = lim_may(st, now)
      if not may or not lim_fits(st, cost, now) then
        if may then lim_forfeit(st) end
        lim_hold(flow, st, li, score, m)
        lim_settle(flow, st, now)
        return
      end
      if not paused[flow] then
        lim_charge(st, cost, now)
        st.pend = st.pend + 1
      end
      lim_settle(flow, st, now)
    end
  end
  if paused[f[1]] then
    park_item(id, f[1])
    parked = parked + 1
  else
    give(id, f, name)
  end
end

-- The first held item of the flow at the head of `heads`.
local function take_head(hm, name, li, heads)
  local flow = string.sub(hm, 22)
  local st = lim_get(flow)
  local r = redis.call('ZRANGE', held_key(flow, li), 0, 0)
  if not st or not r[1] then
    redis.call('ZREM', heads, hm)
    return
  end
  local m = r[1]
  local id = member_id(m)
  local f = id and redis.call('HMGET', item_key(id), unpack(HAND_OUT_FIELDS))
  if not f or not f[5] then
    lim_unhold(flow, st, li, m)
    lim_settle(flow, st, now)
    missing = missing + 1
    return
  end
  local cost = tonumber(f[7] or '1') or 1
  if not lim_fits(st, cost, now) then
    lim_forfeit(st)
    lim_settle(flow, st, now)
    return
  end
  lim_unhold(flow, st, li, m)
  if paused[flow] then
    lim_settle(flow, st, now)
    park_item(id, flow)
    parked = parked + 1
    return
  end
  lim_charge(st, cost, now)
  st.pend = st.pend + 1
  lim_settle(flow, st, now)
  give(id, f, name)
end

for _, lane in ipairs(lanes) do
  local zset, name, heads, li = lane[1], lane[2], lane[3], lane[4]
  while #out < count do
    if limited and redis.call('ZCARD', heads) > 0 then
      -- Merge the lane with the heads, one item at a time.
      local a = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
      local h = redis.call('ZRANGE', heads, 0, 0, 'WITHSCORES')
      local from_head = false
      if h[1] then
        if not a[1] then
          from_head = true
        else
          local sa, sh = tonumber(a[2]), tonumber(h[2])
          from_head = sh < sa or (sh == sa and member_pos(h[1]) < member_pos(a[1]))
        end
      end
      if from_head then
        take_head(h[1], name, li, heads)
      elseif a[1] then
        redis.call('ZREM', zset, a[1])
        take(a[1], a[2], name, li)
      else
        break
      end
    else
      local r = redis.call('ZPOPMIN', zset, count - #out)
      if #r == 0 then break end
      for i = 1, #r, 2 do take(r[i], r[i + 1], name, li) end
    end
  end
end
hand_outs_end()
if missing > 0 then
  redis.log(redis.LOG_WARNING, 'workjournal: ' .. missing .. ' ready entries without an item record in ' .. P)
end
local wake_at = next_due()
if limited then
  local t = lim_next_timer()
  if t and (wake_at == '' or t < tonumber(wake_at)) then wake_at = fmt(t) end
end
return { out, missing, parked, wake_tail(), wake_at, snow }
