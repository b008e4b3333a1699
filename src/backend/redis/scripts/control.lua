-- SPEC 3, Controlling one item: promote, remove, cancel and update. ARGV:
-- now, op, id, ...
-- promote: delayed item `id` becomes due now, at the due lane's tail as a
--   promotion at now would put it (`promote` in common.lua): its
--   not_before lowered to now, the arrival its not_before, its flow's held
--   lane if a limit record holds the flow. Returns 1 moved, 0 when no
--   delayed item is `id` (nothing changes).
-- remove: delete item `id` unrun from the ready lanes (shared or its
--   flow's held lane), delayed, its flow's parked list or the dead
--   letters, with its progress and chunks. A dead letter's outcome stays,
--   as with a purge; a dedup key is left to expire. Returns 1 removed, 0
--   when no item is `id`, IS_PENDING (nothing changes) for a pending item.
-- cancel (SPEC 3, Cancelling; ARGV[4] result_ttl, ARGV[5] the cancelled
--   retention `<count>:<age ms>:<slack>`): a waiting item leaves its state as with
--   remove and ends as cancelled (its outcome kept for result_ttl; its
--   progress and chunks live as long; the item kept by the retention,
--   SPEC 3, History). A pending item gets
--   the mark `cx`, leaves the leases index (so that an ack reads its hash,
--   and `current` answers lost) and a signal `id`, `cancel` goes on the
--   events stream for `wait_cancelled`. Returns ENDED, MARKED (also when
--   marked already), 0 when no item is `id`, IS_DEAD for a dead letter
--   (nothing changes).
-- update (SPEC 3, Updating; ARGV[4] the new tier or '', ARGV[5] its boost
--   (tier x aging_step), ARGV[6] the new not_before or '', ARGV[7] '1' with
--   the new payload in ARGV[8]): a waiting item's fields change; a new
--   not_before takes it out of its lane or delayed into delayed (after
--   now) or the due lane's tail (at or before, as `promote` enters it); a
--   new boost alone moves its rank in place (same member, so the same
--   position). Returns {1, ''} updated, {0, ''} when no item is `id` and no
--   outcome of it is kept, {IS_FINISHED, kind} for a kept outcome,
--   {IS_PENDING | IS_DEAD | IS_PARKED, ''} (IS_PARKED: a parked item given
--   a not_before); nothing changes for those.
local now = clock_now()
local op, id = ARGV[2], ARGV[3]
local k = item_key(id)
if redis.call('EXISTS', k) == 0 then
  if op == 'update' then
    -- A finished item whose outcome is kept answers what it was.
    local exp = redis.call('ZSCORE', K_OUT_EXP, pad(id))
    local o = nil
    if exp and tonumber(exp) > now then o = outcome_of(id) end
    if o then return { IS_FINISHED, o[1] } end
    return { 0, '' }
  end
  return 0
end

if op == 'promote' then
  local nb = redis.call('ZSCORE', K_DELAYED, pad(id))
  if not nb then return 0 end
  local due_at = math.min(tonumber(nb), now)
  redis.call('ZREM', K_DELAYED, pad(id))
  redis.call('HSET', k, 'nb', fmt(due_at), 'st', 'due')
  enqueue(K_READY_DUE, 'due', id, due_at, now)
  wake()
  return 1
end

-- update, remove and cancel
local f = redis.call('HMGET', k, 'st', 'flow', 'hl', 'cx', 'boost')
local st, flow, hl = f[1], f[2] or '', f[3] == '1'

-- The member `<position>:<id>` of `id` in ranked lane `zset`, or nil: a
-- ready member holds no time of the item's, so the lane is scanned.
local function member_of(zset)
  local cursor = '0'
  repeat
    local r = redis.call('ZSCAN', zset, cursor, 'MATCH', '*:' .. id, 'COUNT', 1000)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      if member_id(r[2][i]) == id then return r[2][i] end
    end
  until cursor == '0'
  return nil
end

-- Take `id` out of ready lane `li` (0 due, 1 backlog): the shared lane or
-- its flow's held lane (the one `hl` names first). Whether it was there.
local function take_ready(li)
  local shared = K_READY
  if li == 0 then shared = K_READY_DUE end
  local held = nil
  if flow ~= '' then held = held_key(flow, li) end
  local order = { shared, held }
  if hl and held then order = { held, shared } end
  for _, zset in ipairs(order) do
    local m = member_of(zset)
    if m then
      if zset == shared then
        redis.call('ZREM', zset, m)
      else
        local lim = lim_get(flow)
        if lim then
          lim_unhold(flow, lim, li, m)
          lim_settle(flow, lim, now)
        else
          -- A held lane without its record (changed by hand): the counts
          -- still lose the item.
          redis.call('ZREM', zset, m)
          redis.call('DECR', K_HELD_N)
          if li == 0 then redis.call('DECR', K_HELD_DUE_N) end
        end
      end
      return true
    end
  end
  return false
end

local function take_delayed() return redis.call('ZREM', K_DELAYED, pad(id)) == 1 end
local function take_parked()
  if flow == '' then return false end
  local n = redis.call('LREM', parked_key(flow), 0, id)
  if redis.call('LLEN', parked_key(flow)) == 0 then redis.call('SREM', K_FLOWS, flow) end
  return n > 0
end
local function take_dead() return redis.call('LREM', K_DEAD, 0, id) > 0 end

if op == 'update' then
  local pri, boost, nb, has_payload = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
  if st == 'pending' or redis.call('ZSCORE', K_PENDING, pad(id)) then return { IS_PENDING, '' } end
  if st == 'dead' then return { IS_DEAD, '' } end
  if st == 'parked' and nb ~= '' then return { IS_PARKED, '' } end
  local old_boost = tonumber(f[5] or '0')
  local new_boost = old_boost
  if has_payload == '1' then redis.call('HSET', k, 'payload', ARGV[8]) end
  if pri ~= '' then
    if pri == '0' then
      redis.call('HDEL', k, 'pri', 'boost')
      new_boost = 0
    else
      redis.call('HSET', k, 'pri', pri, 'boost', boost)
      new_boost = tonumber(boost)
    end
  end
  if nb ~= '' then
    local found
    if st == 'delayed' then
      found = take_delayed()
    elseif st == 'due' then
      found = take_ready(0)
    elseif st == 'backlog' then
      found = take_ready(1)
    end
    if not found then
      found = take_delayed() or take_ready(1) or take_ready(0)
      if not found then
        redis.log(redis.LOG_WARNING, 'workjournal: update of item ' .. id .. ' that no lane of ' .. P .. ' held')
      end
    end
    local t = tonumber(nb)
    if t > now then
      redis.call('HSET', k, 'nb', nb, 'st', 'delayed')
      redis.call('ZADD', K_DELAYED, nb, pad(id))
    else
      redis.call('HSET', k, 'nb', nb, 'st', 'due')
      enqueue(K_READY_DUE, 'due', id, t, now)
    end
    wake()
    return { 1, '' }
  end
  if new_boost ~= old_boost and (st == 'backlog' or st == 'due') then
    -- Re-rank in place: the same member (position), the rank moved by
    -- the boosts' difference, so the arrival is kept.
    local li = 1
    if st == 'due' then li = 0 end
    local shared = K_READY
    if li == 0 then shared = K_READY_DUE end
    local zsets = { shared }
    if flow ~= '' then zsets[2] = held_key(flow, li) end
    for _, zset in ipairs(zsets) do
      local m = member_of(zset)
      if m then
        local score = tonumber(redis.call('ZSCORE', zset, m)) + old_boost - new_boost
        redis.call('ZADD', zset, fmt(score), m)
        if zset ~= shared then
          local lim = lim_get(flow)
          if lim then
            -- The head's entry carries its rank: drop it, so that the
            -- settle writes the lane's head again at its new rank.
            local field, heads = 'hb', K_HEADS
            if li == 0 then field, heads = 'hd', K_HEADS_DUE end
            if lim[field] ~= '' then redis.call('ZREM', heads, lim[field]) end
            lim[field] = ''
            lim_settle(flow, lim, now)
          end
        end
        break
      end
    end
    wake()
  end
  return { 1, '' }
end

if st == 'pending' or redis.call('ZSCORE', K_PENDING, pad(id)) then
  if op ~= 'cancel' then return IS_PENDING end
  if not f[4] then
    redis.call('HSET', k, 'cx', '1')
    redis.call('HDEL', K_LEASES, id)
    redis.call('XADD', K_EVENTS, 'MAXLEN', EVENTS_KEPT, '*', 'id', id, 'cancel', '1')
  end
  return MARKED
end
if op == 'cancel' and st == 'dead' then return IS_DEAD end

local found
if op == 'cancel' then
  -- Not a dead letter: the lookup everywhere below skips the dead letters.
  st = st or ''
  if st == 'dead' then st = '' end
end
if st == 'backlog' then
  found = take_ready(1)
elseif st == 'due' then
  found = take_ready(0)
elseif st == 'delayed' then
  found = take_delayed()
elseif st == 'parked' then
  found = take_parked()
elseif st == 'dead' then
  found = take_dead()
end
if not found then
  -- Its index entry was changed behind the queue's back (SPEC 6, Redis
  -- keys changed by hand): look everywhere, and delete the item anyway.
  found = take_delayed() or (op ~= 'cancel' and take_dead()) or take_parked()
    or take_ready(1) or take_ready(0)
  if not found then
    redis.log(redis.LOG_WARNING, 'workjournal: ' .. op .. ' of item ' .. id .. ' that no lane of ' .. P .. ' held')
  end
end
if op == 'cancel' then
  local hc, ha, hs = retention(ARGV[5])
  if hc > 0 and ha > 0 and keep_finished(id, 'cancelled', nil, now) then
    redis.call('HDEL', hist_key(id), 'ca', 'lane', 'hl')
    redis.call('ZADD', history_zset('cancelled'), fmt(now), pad(id))
  end
  redis.call('DEL', k)
  trim_history('cancelled', now, hc, ha, hs, 1)
  prune_outcomes(now)
  finish(id, 'cancelled', '', now, ARGV[4])
  return ENDED
end
redis.call('DEL', k, prog_key(id), chunks_key(id))
return 1
