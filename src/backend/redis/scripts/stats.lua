-- stats, read only: writes nothing, so it runs on a read-only replica too
-- (`clock_view`, SPEC 3, Clock steps). ARGV: now, then the completed and
-- the cancelled retention `<count>:<age ms>:<slack>`. Returns {backlog, due,
-- pending, delayed, parked, dead, oldest last touch or "", now, dead
-- letters dropped past the cap, limited, oldest claim or "", completed,
-- cancelled} (the finished items reads show, SPEC 3, History). Held items
-- (SPEC 3, Flow limits) count in the backlog and due
-- lane; `limited` counts those of flows their limits hold now.
local now = clock_view()
local held = tonumber(redis.call('GET', K_HELD_N) or '0') or 0
local held_due = tonumber(redis.call('GET', K_HELD_DUE_N) or '0') or 0
local due = redis.call('ZCARD', K_READY_DUE) + held_due
local backlog = redis.call('ZCARD', K_READY) + due + held - held_due
local parked = 0
for _, flow in ipairs(redis.call('SMEMBERS', K_FLOWS)) do
  parked = parked + redis.call('LLEN', parked_key(flow))
end
local limited = 0
for _, flow in ipairs(redis.call('SMEMBERS', K_LIMITS)) do
  local st = lim_get(flow)
  if st and st.held > 0 and not lim_may(st, now) then limited = limited + st.held end
end
local oldest = redis.call('ZRANGE', K_PENDING, 0, 0, 'WITHSCORES')
-- The oldest claim: the pending set is ordered by last touch, so the claim
-- times (`ca`) of the pending items are read, as many as are in flight.
local claimed = nil
for _, m in ipairs(redis.call('ZRANGE', K_PENDING, 0, -1)) do
  local ca = tonumber(redis.call('HGET', item_key(unpad(m)), 'ca') or '')
  if ca and (claimed == nil or ca < claimed) then claimed = ca end
end
local oldest_claim = ''
if claimed then oldest_claim = fmt(claimed) end
return { backlog, due, redis.call('ZCARD', K_PENDING), redis.call('ZCARD', K_DELAYED),
  parked, redis.call('LLEN', K_DEAD), oldest[2] or '', fmt(now),
  tonumber(redis.call('GET', K_DEAD_DROPPED) or '0') or 0, limited, oldest_claim,
  history_shown('completed', now, retention(ARGV[2])), history_shown('cancelled', now, retention(ARGV[3])) }
