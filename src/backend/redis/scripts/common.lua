-- Shared prelude, prepended to every script of the Redis backend.
-- KEYS[1] is the namespace prefix "{ns}:" (one hash tag: every key of the
-- queue lives in one cluster slot). ARGV[1] is now in ms by the queue's
-- clock, or "" to read the server's TIME.
local P = KEYS[1]
local K_SEQ = P .. 'seq'
local K_LEASE = P .. 'lease'
-- Schema-1 layout: the ready lanes were streams; only migrate.lua reads them.
local K_BACKLOG = P .. 'backlog'
local K_DUE = P .. 'due'
-- The ready lanes: sorted sets by rank (arrival - tier x aging_step), the
-- member `<position padded to 20 digits>:<id>`, so that equal ranks go by
-- position (SPEC 3, Priority).
local K_READY = P .. 'ready'
local K_READY_DUE = P .. 'ready:due'
local K_POS = P .. 'pos'
local K_CLOCKS = P .. 'clocks'
local K_DELAYED = P .. 'delayed'
local K_PENDING = P .. 'pending'
-- The lease of every pending item (id -> lease), a copy of the item hash's
-- `ls` kept where the item is handed out and its lease ends, so that an
-- `ack_batch` checks all its receipts with one HMGET (SPEC 7, "Redis ack
-- path"). An id of a pending item missing here (handed out by a build
-- before this index) is checked against its item hash.
local K_LEASES = P .. 'leases'
local K_PAUSED = P .. 'paused'
local K_FLOWS = P .. 'flows'
local K_DEAD = P .. 'dead'
local K_DEAD_DROPPED = P .. 'dead:dropped'
local K_DEDUP = P .. 'dedup'
local K_DEDUP_EXP = P .. 'dedup:exp'
local K_DONE_EXP = P .. 'done:exp'
local K_WAKE = P .. 'wake'
local K_OUT_EXP = P .. 'out:exp'
-- Outcomes (SPEC 3): one hash, id -> `<kind>:<at>:<value>`, so that the
-- outcomes of one call are one HSET. Outcomes written by builds before it
-- are hashes `{ns}:out:<id>`, still read (after this one) and deleted
-- with their expiry.
local K_OUT = P .. 'out'
-- The namespace's layout version (LAYOUT, SPEC 6), written at connect.
local K_LAYOUT = P .. 'layout'
local K_EVENTS = P .. 'events'
-- SPEC 3, Clock steps: the latest time the queue has seen, per clock: by
-- the server's TIME (the fleet's clock) in `{ns}:clock`, by a test clock
-- the handles were given (ARGV[1]) in `{ns}:clock:test`, so that handles on
-- the two never take their disagreement for a step of either.
local K_CLOCK = P .. 'clock'
local K_CLOCK_TEST = P .. 'clock:test'
-- SPEC 3, Flow limits: the set of flows with a limit record, each record a
-- hash `{ns}:limit:<flow>`; the held lanes `{ns}:held:<flow>` and
-- `{ns}:held-due:<flow>` (sorted sets like the ready lanes); the heads of
-- the flows that may run, `{ns}:heads` and `{ns}:heads-due` (score the
-- head's rank, member `<position>:<flow>`); the timers of held flows
-- `{ns}:limits-timers` (score ms, member flow); counters of held items.
local K_LIMITS = P .. 'limits'
local K_HEADS = P .. 'heads'
local K_HEADS_DUE = P .. 'heads-due'
local K_LIMIT_TIMERS = P .. 'limits-timers'
local K_HELD_N = P .. 'limits-held'
local K_HELD_DUE_N = P .. 'limits-held-due'
-- PRUNE_LIMIT, MAX_DELIVERIES_REASON and the reply codes (LOST,
-- DEFAULT_FLOW, DELAYED, DEAD_LETTERED, PARKED) and EVENTS_KEPT (entries the
-- events stream keeps, all of which a waiter reads) come from Rust, in a prelude
-- written before this file (`lua_constants` in scripts.rs), and so does CLOCK_TOLERANCE
-- (CLOCK_STEP_TOLERANCE_MS: a smaller move back is noise).

local function item_key(id) return P .. 'item:' .. id end
local function parked_key(flow) return P .. 'parked:' .. flow end
local function out_key(id) return P .. 'out:' .. id end
local function prog_key(id) return P .. 'prog:' .. id end
local function chunks_key(id) return P .. 'chunks:' .. id end
-- Sorted-set members are ids padded to 20 digits, so that ties on the score
-- order by id (members of equal score sort as strings).
local function pad(id) return string.format('%020d', tonumber(id)) end
local function unpad(m) return string.format('%d', tonumber(m)) end
local function fmt(n) return string.format('%d', n) end

-- Call `cmd key` with `list` appended, in chunks (Lua's unpack has a limit).
local function call_chunked(cmd, key, list, extra)
  local i = 1
  while i <= #list do
    local last = math.min(i + 999, #list)
    if extra then
      redis.call(cmd, key, extra, unpack(list, i, last))
    else
      redis.call(cmd, key, unpack(list, i, last))
    end
    i = last + 1
  end
end

-- DEL the keys of `list`, in chunks.
local function del_chunked(list)
  local i = 1
  while i <= #list do
    local last = math.min(i + 999, #list)
    redis.call('DEL', unpack(list, i, last))
    i = last + 1
  end
end

-- Move every member's score of sorted set `key` back by `back` (not below
-- 0); `field`, if given, is the item-hash field that mirrors the score.
local function shift_scores(key, back, field)
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #all - 1, 2 do
    local m = all[i]
    local t = tonumber(all[i + 1]) - back
    if t < 0 then t = 0 end
    redis.call('ZADD', key, t, m)
    if field then redis.call('HSET', item_key(unpad(m)), field, fmt(t)) end
  end
end

-- Move a ready lane back by `back`: every rank (which may go below 0, a
-- rank being arrival - boost) and the lane's latest arrival (`field` of
-- the clocks hash), so that arrivals after the step still rank behind the
-- items already waiting and aging keeps counting elapsed time (SPEC 3,
-- Priority; SPEC 3, Clock steps).
local function shift_lane(zset, field, back)
  local all = redis.call('ZRANGE', zset, 0, -1, 'WITHSCORES')
  for i = 1, #all - 1, 2 do
    redis.call('ZADD', zset, fmt(tonumber(all[i + 1]) - back), all[i])
  end
  local last = redis.call('HGET', K_CLOCKS, field)
  if last then
    local t = tonumber(last) - back
    if t < 0 then t = 0 end
    redis.call('HSET', K_CLOCKS, field, fmt(t))
  end
end

-- The clock this script keeps time by: the handle's test clock when
-- ARGV[1] holds its reading, else the server's TIME.
local function on_test_clock()
  return ARGV[1] ~= nil and ARGV[1] ~= ''
end

local function clock_key()
  if on_test_clock() then return K_CLOCK_TEST end
  return K_CLOCK
end

local function read_clock()
  if on_test_clock() then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- SPEC 3, Clock steps: a clock more than the tolerance below the latest
-- time the queue has seen by that same clock has stepped back; move every
-- timer, claim time, expiry and ready-lane rank back by the step, so that
-- waits are measured in elapsed time. Returns the queue's time: the
-- reading, or the latest time seen when the reading is below it by no
-- more than the tolerance (the queue's time never runs backward by noise:
-- a handle on a test clock reads it before its script runs, and a claim
-- must not hand out a timer that a later reading promoted, at its earlier
-- reading).
local function observe_clock(now)
  local key = clock_key()
  local high = tonumber(redis.call('GET', key) or '0') or 0
  if high - now > CLOCK_TOLERANCE then
    local back = high - now
    shift_scores(K_DELAYED, back, 'nb')
    -- The pending set's score is the last touch, the item's `ca` its
    -- claim: both move back by the step, each from its own time.
    shift_scores(K_PENDING, back, nil)
    for _, m in ipairs(redis.call('ZRANGE', K_PENDING, 0, -1)) do
      local ca = tonumber(redis.call('HGET', item_key(unpad(m)), 'ca') or '')
      if ca then
        local t = ca - back
        if t < 0 then t = 0 end
        redis.call('HSET', item_key(unpad(m)), 'ca', fmt(t))
      end
    end
    shift_scores(K_DONE_EXP, back, nil)
    shift_scores(K_DEDUP_EXP, back, nil)
    shift_scores(K_OUT_EXP, back, nil)
    shift_lane(K_READY, 'backlog', back)
    shift_lane(K_READY_DUE, 'due', back)
    -- SPEC 3, Flow limits: held lanes, heads, timers, back-offs, windows.
    for _, flow in ipairs(redis.call('SMEMBERS', K_LIMITS)) do
      shift_lane(P .. 'held:' .. flow, '', back)
      shift_lane(P .. 'held-due:' .. flow, '', back)
      local lk = P .. 'limit:' .. flow
      local f = redis.call('HMGET', lk, 'til', 'ws')
      local til, ws = tonumber(f[1] or '0') or 0, tonumber(f[2] or '0') or 0
      if til > 0 then til = math.max(1, til - back) end
      redis.call('HSET', lk, 'til', fmt(til), 'ws', fmt(math.max(0, ws - back)))
    end
    shift_lane(K_HEADS, '', back)
    shift_lane(K_HEADS_DUE, '', back)
    shift_scores(K_LIMIT_TIMERS, back, nil)
    redis.log(redis.LOG_WARNING, 'workjournal: the clock stepped back ' .. back .. ' ms in ' .. P .. ': timers and leases moved with it')
    redis.call('SET', key, fmt(now))
    return now
  elseif now > high then
    redis.call('SET', key, fmt(now))
    return now
  end
  return high
end

-- The queue's time for a script that writes (every script but `stats` and
-- `look`): the clock read, noted, and a step back acted on.
local function clock_now()
  return observe_clock(read_clock())
end

-- The queue's time for a script that writes nothing (`stats`, `look`), so
-- that it runs on a read-only replica too: the clock read, and nothing
-- noted or moved. After a step back that no writing script has met yet, it
-- answers as if the stored times had moved: it compares them with the
-- latest time seen instead of the reading, which are the same comparisons
-- (every stored time would move back by the step).
local function clock_view()
  local now = read_clock()
  local high = tonumber(redis.call('GET', clock_key()) or '0') or 0
  if high > now then return high end
  return now
end

local function wake()
  redis.call('XADD', K_WAKE, 'MAXLEN', '16', '*', 'w', '1')
end

-- The id of the last entry of a signal stream, '0-0' when empty: a
-- blocking waiter reads after it, so no later signal is missed.
local function stream_tail(key)
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  if last and last[1] then return last[1][1] end
  return '0-0'
end

local function wake_tail() return stream_tail(K_WAKE) end

-- Outcomes and progress (SPEC 3). A signal on the events stream wakes every
-- `wait_outcome` and `wait_chunks` (trimmed to 64 entries; holds no data).
local function event(id)
  redis.call('XADD', K_EVENTS, 'MAXLEN', EVENTS_KEPT, '*', 'id', id)
end

local function events_tail() return stream_tail(K_EVENTS) end

local function forget_outcome(id)
  redis.call('HDEL', K_OUT, id)
  redis.call('DEL', out_key(id))
  redis.call('ZREM', K_OUT_EXP, pad(id))
end

-- Item `id`'s outcome as {kind, value, at}, or nil; expiry is the caller's.
local function outcome_of(id)
  local s = redis.call('HGET', K_OUT, id)
  if s then
    local i = string.find(s, ':', 1, true)
    local j = i and string.find(s, ':', i + 1, true)
    if j then return { string.sub(s, 1, i - 1), string.sub(s, j + 1), string.sub(s, i + 1, j - 1) } end
    return nil
  end
  local f = redis.call('HMGET', out_key(id), 'kind', 'value', 'at')
  if f[1] then return { f[1], f[2] or '', f[3] or '0' } end
  return nil
end

-- Delete up to PRUNE_LIMIT outcomes expired at `now`, with their progress
-- and chunks: one HDEL and one DEL for all of them.
local function prune_outcomes(now)
  local ms = redis.call('ZRANGEBYSCORE', K_OUT_EXP, '-inf', now, 'LIMIT', 0, PRUNE_LIMIT)
  if #ms == 0 then return end
  local ids, keys = {}, {}
  for _, m in ipairs(ms) do
    local id = unpad(m)
    ids[#ids + 1] = id
    keys[#keys + 1] = out_key(id)
    keys[#keys + 1] = prog_key(id)
    keys[#keys + 1] = chunks_key(id)
  end
  call_chunked('HDEL', K_OUT, ids)
  del_chunked(keys)
  redis.call('ZREM', K_OUT_EXP, unpack(ms))
end

-- The most outcomes one signal on the events stream carries.
local OUTCOMES_PER_SIGNAL = 100

-- Keep how each item of `list` ({id, value} pairs, or {id, value, padded
-- id} from a caller that has padded it already) finished (`kind` done or
-- dead, `value` the result or reason) for `ttl` ms; 0 keeps nothing. Wakes
-- the waiters: one signal per OUTCOMES_PER_SIGNAL items, a group `id`
-- [`kind`, `value`, `at`] per item (a small outcome rides on its signal,
-- so a waiter needs no second read). The outcomes, the expiry index,
-- deletions and signals are each written once per call. The caller prunes
-- expired outcomes once per script (`prune_outcomes`).
local function finish_all(list, kind, now, ttl)
  if #list == 0 then return end
  ttl = tonumber(ttl) or 0
  local at = fmt(now)
  local head = kind .. ':' .. at .. ':'
  local index, gone, ids, outs, signal = {}, {}, {}, {}, {}
  local exp = now + ttl
  for i, r in ipairs(list) do
    local id, value = r[1], r[2]
    local padded = r[3] or pad(id)
    if ttl > 0 then
      -- HSET replaces the old outcome of the id.
      outs[#outs + 1] = id
      outs[#outs + 1] = head .. value
      index[#index + 1] = exp
      index[#index + 1] = padded
    else
      -- No outcome is kept, so its progress and chunks go at once (they
      -- live as long as the outcome, SPEC 3, Outcomes).
      ids[#ids + 1] = id
      gone[#gone + 1] = out_key(id)
      gone[#gone + 1] = prog_key(id)
      gone[#gone + 1] = chunks_key(id)
      index[#index + 1] = padded
    end
    signal[#signal + 1] = 'id'
    signal[#signal + 1] = id
    if ttl > 0 and #value <= 1024 then
      signal[#signal + 1] = 'kind'
      signal[#signal + 1] = kind
      signal[#signal + 1] = 'value'
      signal[#signal + 1] = value
      signal[#signal + 1] = 'at'
      signal[#signal + 1] = at
    end
    if #signal >= OUTCOMES_PER_SIGNAL * 8 or i == #list then
      redis.call('XADD', K_EVENTS, 'MAXLEN', EVENTS_KEPT, '*', unpack(signal))
      signal = {}
    end
  end
  if ttl > 0 then
    call_chunked('HSET', K_OUT, outs)
    call_chunked('ZADD', K_OUT_EXP, index)
  else
    call_chunked('HDEL', K_OUT, ids)
    del_chunked(gone)
    call_chunked('ZREM', K_OUT_EXP, index)
  end
end

local function finish(id, kind, value, now, ttl)
  finish_all({ { id, value } }, kind, now, ttl)
end

local function entry_field(fields, name)
  if type(fields) ~= 'table' then return nil end
  for i = 1, #fields - 1, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

-- The id in a ready-lane member `<position>:<id>`.
local function member_id(m)
  local i = string.find(m, ':', 1, true)
  if not i then return nil end
  return string.sub(m, i + 1)
end

-- The position in a ready-lane member.
local function member_pos(m)
  local i = string.find(m, ':', 1, true)
  if not i then return 0 end
  return tonumber(string.sub(m, 1, i - 1)) or 0
end

-- ---- SPEC 3, Flow limits: the rule of crate::limit::FlowState ----------
local function limit_key(flow) return P .. 'limit:' .. flow end
local function held_key(flow, li)
  if li == 0 then return P .. 'held-due:' .. flow end
  return P .. 'held:' .. flow
end
local LIMIT_FIELDS = { 'n', 'per', 'cap', 'til', 'ws', 'used', 'pend', 'held', 'hd', 'hb' }

local function lim_get(flow)
  local f = redis.call('HMGET', limit_key(flow), unpack(LIMIT_FIELDS))
  if not f[1] then return nil end
  local st = {}
  for i = 1, 8 do st[LIMIT_FIELDS[i]] = tonumber(f[i]) or 0 end
  st.hd = f[9] or ''
  st.hb = f[10] or ''
  return st
end
local function lim_fresh(st, now) return now >= st.ws + st.per end
local function lim_used(st, now)
  if st.n > 0 and not lim_fresh(st, now) then return st.used end
  return 0
end
local function lim_may(st, now)
  if st.til > now then return false end
  if st.cap > 0 and st.pend >= st.cap then return false end
  if st.n > 0 and lim_used(st, now) >= st.n then return false end
  return true
end
local function lim_fits(st, cost, now)
  if st.n == 0 then return true end
  local u = lim_used(st, now)
  return u == 0 or u + cost <= st.n
end
local function lim_forfeit(st)
  if st.n > 0 and st.used < st.n then st.used = st.n end
end
local function lim_charge(st, cost, now)
  if st.n > 0 then
    if lim_fresh(st, now) then
      st.ws = now
      st.used = 0
    end
    st.used = st.used + cost
  end
end
local function lim_lifts(st, now)
  if st.til > now then return st.til end
  if st.n > 0 and lim_used(st, now) >= st.n then return st.ws + st.per end
  return nil
end
local function lim_idle(st, now)
  return st.n == 0 and st.cap == 0 and st.til <= now and st.held == 0
end
local function lim_in_force(st, now)
  return st.n > 0 or st.cap > 0 or st.til > now
end

-- Put the heads and timer entries of `flow` right for `st` at `now` and
-- store it, or drop the record once nothing is set or held.
local function lim_settle(flow, st, now)
  local idle = lim_idle(st, now)
  local may = lim_may(st, now)
  for li = 0, 1 do
    local field = 'hb'
    local heads = K_HEADS
    if li == 0 then
      field = 'hd'
      heads = K_HEADS_DUE
    end
    local want, score = '', nil
    if may and not idle then
      local r = redis.call('ZRANGE', held_key(flow, li), 0, 0, 'WITHSCORES')
      if r[1] then
        want = string.sub(r[1], 1, 20) .. ':' .. flow
        score = r[2]
      end
    end
    if want ~= st[field] then
      if st[field] ~= '' then redis.call('ZREM', heads, st[field]) end
      if want ~= '' then redis.call('ZADD', heads, score, want) end
      st[field] = want
    end
  end
  local t = nil
  if not may and not idle and st.held > 0 then t = lim_lifts(st, now) end
  if t then
    redis.call('ZADD', K_LIMIT_TIMERS, t, flow)
  else
    redis.call('ZREM', K_LIMIT_TIMERS, flow)
  end
  if idle then
    redis.call('DEL', limit_key(flow))
    redis.call('SREM', K_LIMITS, flow)
  else
    local args = {}
    for i = 1, 8 do
      args[#args + 1] = LIMIT_FIELDS[i]
      args[#args + 1] = fmt(st[LIMIT_FIELDS[i]])
    end
    redis.call('HSET', limit_key(flow), 'hd', st.hd, 'hb', st.hb, unpack(args))
    redis.call('SADD', K_LIMITS, flow)
  end
end

-- Whether any flow has a limit record.
local function any_limits() return redis.call('EXISTS', K_LIMITS) == 1 end

-- Put ready-lane member `m` (score `score`) of `flow` into its held lane;
-- the item hash's `hl` says so to `find` (SPEC 12.1).
local function lim_hold(flow, st, li, score, m)
  redis.call('ZADD', held_key(flow, li), score, m)
  local id = member_id(m)
  if id and redis.call('EXISTS', item_key(id)) == 1 then redis.call('HSET', item_key(id), 'hl', '1') end
  st.held = st.held + 1
  redis.call('INCR', K_HELD_N)
  if li == 0 then redis.call('INCR', K_HELD_DUE_N) end
end

local function lim_unhold(flow, st, li, m)
  redis.call('ZREM', held_key(flow, li), m)
  local id = member_id(m)
  if id then redis.call('HDEL', item_key(id), 'hl') end
  st.held = st.held - 1
  if st.held < 0 then st.held = 0 end
  redis.call('DECR', K_HELD_N)
  if li == 0 then redis.call('DECR', K_HELD_DUE_N) end
end

-- Settle every flow whose back-off or rate window has ended by `now`.
local function lift_due(now)
  for _, flow in ipairs(redis.call('ZRANGEBYSCORE', K_LIMIT_TIMERS, '-inf', now)) do
    local st = lim_get(flow)
    if st then
      lim_settle(flow, st, now)
    else
      redis.call('ZREM', K_LIMIT_TIMERS, flow)
    end
  end
end

-- `delta` items of `flow` entered (above 0) or left (below 0) pending;
-- wakes the blocked claims when a held flow may run again.
local function lim_pending(flow, delta, now)
  if not any_limits() or not flow or flow == '' then return end
  local st = lim_get(flow)
  if not st then return end
  st.pend = st.pend + delta
  if st.pend < 0 then st.pend = 0 end
  lim_settle(flow, st, now)
  if delta < 0 and st.held > 0 then
    redis.call('XADD', K_WAKE, 'MAXLEN', '16', '*', 'w', '1')
  end
end

local function lim_next_timer()
  local r = redis.call('ZRANGE', K_LIMIT_TIMERS, 0, 0, 'WITHSCORES')
  if r[2] then return tonumber(r[2]) end
  return nil
end

-- SPEC 3, Priority: put `id` into the ready lane `zset`, arriving at
-- `arrival` or at the lane's latest arrival so far (`field` of the clocks
-- hash), so that a clock stepping back keeps FIFO. Its rank is the arrival
-- minus the item's `boost` (tier x aging_step, fixed at add).
local function enqueue(zset, field, id, arrival, now)
  local last = tonumber(redis.call('HGET', K_CLOCKS, field) or '0')
  if arrival < last then
    arrival = last
  elseif arrival > last then
    redis.call('HSET', K_CLOCKS, field, fmt(arrival))
  end
  local pos = redis.call('INCR', K_POS)
  local f = redis.call('HMGET', item_key(id), 'boost', 'flow')
  local boost = tonumber(f[1] or '0')
  local member = pad(pos) .. ':' .. id
  -- SPEC 3, Flow limits: a limited flow's items wait in its held lane.
  if any_limits() and f[2] and f[2] ~= '' then
    local st = lim_get(f[2])
    if st then
      local li = 1
      if zset == K_READY_DUE then li = 0 end
      lim_hold(f[2], st, li, fmt(arrival - boost), member)
      lim_settle(f[2], st, now or arrival)
      return
    end
  end
  redis.call('ZADD', zset, fmt(arrival - boost), member)
end

-- Whether item `id` is pending under lease `lease`, and not marked
-- cancelled (`cx`, SPEC 3, Cancelling: a marked item answers its holder
-- as lost here; the caller then ends it through `cancelled`).
local function current(id, lease)
  local f = redis.call('HMGET', item_key(id), 'st', 'ls', 'cx')
  return f[1] == 'pending' and not f[3] and f[2] and tonumber(f[2]) == tonumber(lease)
end

-- Take a pending item out of pending: drop the lease.
local function release(id, now)
  if any_limits() then lim_pending(redis.call('HGET', item_key(id), 'flow'), -1, now) end
  redis.call('ZREM', K_PENDING, pad(id))
  redis.call('HDEL', K_LEASES, id)
  redis.call('HDEL', item_key(id), 'ls', 'ca', 'owner')
end

-- SPEC 3, History: a finished item kept by its state's retention is the
-- item's hash renamed to `{ns}:hist:<id>`, with `st` completed or
-- cancelled, `fin` (when it finished), `res` (a completed item's result)
-- and `ca` (the claim of its last delivery, if it ran); the sorted sets
-- `{ns}:completed` and `{ns}:cancelled` index them by `fin`, members
-- padded ids. A retention comes from Rust as one argument
-- `<count>:<age ms>:<slack>` (the slack: how far past the count a state
-- may grow before a finish trims it back, so that trims come in runs).
local function hist_key(id) return P .. 'hist:' .. id end
local function history_zset(state) return P .. state end
local function retention(s)
  local parts = {}
  for p in string.gmatch(s or '', '[^:]+') do parts[#parts + 1] = tonumber(p) or 0 end
  return parts[1] or 0, parts[2] or 0, parts[3] or 0
end

-- Keep item `id` as finished in `state` at `now`: its hash renamed (the
-- payload is not copied), with result `res` (completed; nil for
-- cancelled). The caller has checked that the retention keeps any, adds
-- the index entries (ZADD of `now`, padded id) for all it kept in one
-- call, and trims after (`trim_history`). A hash that is gone (keys
-- changed by hand) is skipped: returns false.
local function keep_finished(id, state, res, now)
  local h = hist_key(id)
  local moved = redis.pcall('RENAME', item_key(id), h)
  if type(moved) == 'table' and moved.err then return false end
  local f = { 'st', state, 'fin', fmt(now) }
  if res then
    f[#f + 1] = 'res'
    f[#f + 1] = res
  end
  redis.call('HSET', h, unpack(f))
  return true
end

-- How many finished items of `state` reads show at `now` under the
-- retention `count`, `age`: those that finished less than `age` ago, at
-- most `count` of them (the newest).
local function history_shown(state, now, count, age, _slack)
  if count <= 0 or age <= 0 then return 0 end
  local n = redis.call('ZCOUNT', history_zset(state), '(' .. fmt(now - age), '+inf')
  return math.min(n, count)
end

-- Drop the oldest finished items of `state` past the retention's age (at
-- most PRUNE_LIMIT a call: reads hide the rest until a later finish trims
-- them), then past its count: up to what this call `added` plus the slack
-- plus PRUNE_LIMIT, so a state over its count by no more than the slack
-- before the call is back within it after, and a count lowered between
-- runs drains PRUNE_LIMIT a call. Only once the oldest is past the age or
-- the state holds more than the count plus the slack.
local function trim_history(state, now, count, age, slack, added)
  local z = history_zset(state)
  local n = redis.call('ZCARD', z)
  if n == 0 then return end
  local oldest = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
  if n <= count + (slack or 0) and tonumber(oldest[2]) > now - age then return end
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', fmt(now - age), 'LIMIT', 0, PRUNE_LIMIT)
  local excess = math.min(n - #gone - count, (added or 0) + (slack or 0) + PRUNE_LIMIT)
  if excess > 0 then
    local more = redis.call('ZRANGE', z, #gone, #gone + excess - 1)
    for _, m in ipairs(more) do gone[#gone + 1] = m end
  end
  if #gone == 0 then return end
  local keys = {}
  for i, m in ipairs(gone) do keys[i] = hist_key(unpad(m)) end
  del_chunked(keys)
  call_chunked('ZREM', z, gone)
end

-- End marked pending item `id` (SPEC 3, Cancelling): out of pending and
-- gone, kept by the cancelled retention `hist` (SPEC 3, History); the
-- caller keeps its outcome (`finish_all` of kind `cancelled`).
local function end_cancelled(id, now, hist)
  local hc, ha, hs = retention(hist)
  local ca = redis.call('HGET', item_key(id), 'ca')
  release(id, now)
  if hc > 0 and ha > 0 and keep_finished(id, 'cancelled', nil, now) then
    -- `release` dropped the claim time: the last delivery's, kept.
    if ca then redis.call('HSET', hist_key(id), 'ca', ca) end
    redis.call('HDEL', hist_key(id), 'cx')
    redis.call('ZADD', history_zset('cancelled'), fmt(now), pad(id))
  end
  redis.call('DEL', item_key(id))
  trim_history('cancelled', now, hc, ha, hs, 1)
end

local function park_item(id, flow)
  redis.call('RPUSH', parked_key(flow), id)
  redis.call('SADD', K_FLOWS, flow)
  redis.call('HSET', item_key(id), 'st', 'parked')
  redis.call('HDEL', item_key(id), 'lane')
end

-- Move item `id` to the dead letters (newest at the head of the list); drop
-- the oldest past `cap`. Returns how many were dropped.
local function bury(id, reason, now, cap, ttl)
  prune_outcomes(now)
  finish(id, 'dead', reason, now, ttl)
  redis.call('HSET', item_key(id), 'st', 'dead', 'reason', reason, 'failed', fmt(now))
  redis.call('HDEL', item_key(id), 'lane')
  redis.call('LPUSH', K_DEAD, id)
  local dropped = 0
  while redis.call('LLEN', K_DEAD) > cap do
    local old = redis.call('RPOP', K_DEAD)
    if not old then break end
    redis.call('DEL', item_key(old))
    dropped = dropped + 1
  end
  if dropped > 0 then redis.call('INCRBY', K_DEAD_DROPPED, dropped) end
  return dropped
end

local function to_backlog(id, now)
  enqueue(K_READY, 'backlog', id, now, now)
  redis.call('HSET', item_key(id), 'st', 'backlog')
end

-- Move every delayed item due at `now` to the due-lane tail, in
-- (not_before, id) order. Returns how many moved.
local function promote(now)
  local ids = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'WITHSCORES')
  for i = 1, #ids, 2 do
    local id = unpad(ids[i])
    enqueue(K_READY_DUE, 'due', id, tonumber(ids[i + 1]), now)
    redis.call('HSET', item_key(id), 'st', 'due')
  end
  if #ids > 0 then
    redis.call('ZREMRANGEBYSCORE', K_DELAYED, '-inf', now)
    wake()
  end
  return #ids / 2
end

-- Handing items out (claim, step, reclaim): the one place an item
-- becomes pending. The hand-outs of one script share one read and one
-- write of the lease counter and one write of the pending index:
-- `hand_outs_begin` before the first, `hand_outs_end` after the last.
local HAND_OUT_FIELDS = { 'flow', 'payload', 'enq', 'nb', 'dlv', 'pri', 'cost' }
local H = nil
local function hand_outs_begin(now, consumer)
  H = { lease = tonumber(redis.call('GET', K_LEASE) or '0'), zadd = {}, leases = {},
    now = now, snow = fmt(now), consumer = consumer }
end

-- Hand item `id` to the consumer: pending, deliveries + 1, a new lease.
-- `f` holds its HAND_OUT_FIELDS (nil: read here). `counted`: the caller
-- has already counted it as pending in its flow's limit record (claim
-- does, as it charges the flow's permits).
local function hand_out(id, lane, f, counted)
  f = f or redis.call('HMGET', item_key(id), unpack(HAND_OUT_FIELDS))
  H.lease = H.lease + 1
  local dlv = (tonumber(f[5]) or 0) + 1
  local ls = fmt(H.lease)
  redis.call('HSET', item_key(id), 'dlv', dlv, 'st', 'pending', 'lane', lane,
    'ls', ls, 'ca', H.snow, 'owner', H.consumer)
  H.zadd[#H.zadd + 1] = H.now
  H.zadd[#H.zadd + 1] = pad(id)
  H.leases[#H.leases + 1] = id
  H.leases[#H.leases + 1] = ls
  if not counted then lim_pending(f[1], 1, H.now) end
  return { id, f[1] or '', f[2] or '', f[3] or '0', f[4] or '', dlv, lane, H.snow, H.lease,
    f[6] or '0', f[7] or '1' }
end

local function hand_outs_end()
  if #H.zadd > 0 then
    redis.call('SET', K_LEASE, fmt(H.lease))
    call_chunked('ZADD', K_PENDING, H.zadd)
    call_chunked('HSET', K_LEASES, H.leases)
  end
end

local function next_due()
  local r = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if r[2] then return r[2] end
  return ''
end

-- Forget dedup keys whose window ended (a bounded number per call).
local function prune_dedup(now)
  local old = redis.call('ZRANGEBYSCORE', K_DEDUP_EXP, '-inf', now, 'LIMIT', 0, PRUNE_LIMIT)
  for _, key in ipairs(old) do
    redis.call('HDEL', K_DEDUP, key)
    redis.call('ZREM', K_DEDUP_EXP, key)
  end
end

-- The first id added under dedup `key`, while its window is open.
local function dedup_known(key, now)
  local exp = redis.call('ZSCORE', K_DEDUP_EXP, key)
  if exp and tonumber(exp) > now then return redis.call('HGET', K_DEDUP, key) end
  return nil
end

-- How many of `items` would journal a new item: each {has_key, key}; a key
-- earlier in the batch is live only while its window is open (never with a
-- window of 0, deduplication off).
local function count_fresh(items, now, window)
  local fresh = 0
  local seen = {}
  for _, it in ipairs(items) do
    if it[1] == '1' then
      local key = it[2]
      if not (seen[key] and window > 0) and not dedup_known(key, now) then
        seen[key] = true
        fresh = fresh + 1
      end
    else
      fresh = fresh + 1
    end
  end
  return fresh
end

-- Whether `fresh` new items would push backlog + due + delayed past `limit`
-- ("" = no limit). The ready lanes hold ready items only (a claim takes
-- the member out), so their sizes are the counts.
local function over_capacity(limit, fresh)
  if limit == '' or fresh == 0 then return false end
  local waiting = redis.call('ZCARD', K_READY) + redis.call('ZCARD', K_READY_DUE)
    + redis.call('ZCARD', K_DELAYED) + tonumber(redis.call('GET', K_HELD_N) or '0')
  return waiting + fresh > tonumber(limit)
end

-- Journaling new items (add, add_batch, add_delayed, forward): the one
-- place an item is created. While no flow has a limit record, the adds of
-- one script share one read and one write of the id and position counters
-- and of the backlog clock, and one ZADD to the backlog: per item one HSET.
-- With limits, each item goes through `to_backlog` (its flow may hold it).
-- `adds_begin` before the first, `adds_end` after the last.
local A = nil
local function adds_begin(now)
  A = { now = now, fast = not any_limits(), ready = {} }
  if A.fast then
    A.seq0 = tonumber(redis.call('GET', K_SEQ) or '0')
    A.seq = A.seq0
    A.pos0 = tonumber(redis.call('GET', K_POS) or '0')
    A.pos = A.pos0
    A.last = tonumber(redis.call('HGET', K_CLOCKS, 'backlog') or '0')
    A.arrival = math.max(now, A.last)
    A.rank0 = fmt(A.arrival)
  end
end

-- Write a new item `id` (hash key `k`) that is not the common kind: a
-- table of its fields, then the delayed set, the fast ready list, or
-- `to_backlog` (its flow may hold it).
local function journal_item(id, k, flow, payload, enq, nb, pri, boost, now, cost)
  local f = { 'flow', flow, 'payload', payload, 'enq', enq, 'dlv', 0 }
  if cost and cost ~= '' and cost ~= '1' then
    f[#f + 1] = 'cost'
    f[#f + 1] = cost
  end
  local b = 0
  if pri ~= '0' and pri ~= '' then
    f[#f + 1] = 'pri'
    f[#f + 1] = pri
    f[#f + 1] = 'boost'
    f[#f + 1] = boost
    b = tonumber(boost) or 0
  end
  if nb ~= '' then
    f[#f + 1] = 'nb'
    f[#f + 1] = nb
    f[#f + 1] = 'st'
    f[#f + 1] = 'delayed'
    redis.call('HSET', k, unpack(f))
    redis.call('ZADD', K_DELAYED, nb, pad(id))
  elseif A.fast then
    f[#f + 1] = 'st'
    f[#f + 1] = 'backlog'
    redis.call('HSET', k, unpack(f))
    -- As `enqueue` ranks it: arrival - boost, member <position>:<id>.
    A.pos = A.pos + 1
    A.ready[#A.ready + 1] = fmt(A.arrival - b)
    A.ready[#A.ready + 1] = pad(A.pos) .. ':' .. id
  else
    redis.call('HSET', k, unpack(f))
    to_backlog(id, now)
  end
end

-- Journal one new item of tier `pri` (`boost` = tier x aging_step in ms,
-- SPEC 3, Priority); nb = '' for the backlog. Returns its id.
local function new_item(flow, payload, enq, nb, pri, boost, has_key, key, now, window, cost)
  local id
  if A.fast then
    A.seq = A.seq + 1
    id = fmt(A.seq)
  else
    id = fmt(redis.call('INCR', K_SEQ))
  end
  local k = item_key(id)
  if A.fast and nb == '' and (pri == '0' or pri == '') and (cost == nil or cost == '' or cost == '1') then
    -- The common item (backlog, tier 0, cost 1): no field table, and the
    -- rank every such item of this call shares (arrival - 0).
    redis.call('HSET', k, 'flow', flow, 'payload', payload, 'enq', enq, 'dlv', '0', 'st', 'backlog')
    A.pos = A.pos + 1
    A.ready[#A.ready + 1] = A.rank0
    A.ready[#A.ready + 1] = pad(A.pos) .. ':' .. id
  else
    journal_item(id, k, flow, payload, enq, nb, pri, boost, now, cost)
  end
  if has_key == '1' then
    redis.call('HSET', K_DEDUP, key, id)
    redis.call('ZADD', K_DEDUP_EXP, now + window, key)
  end
  return id
end

local function adds_end()
  if not A.fast then return end
  if A.seq > A.seq0 then redis.call('SET', K_SEQ, fmt(A.seq)) end
  if A.pos > A.pos0 then
    redis.call('SET', K_POS, fmt(A.pos))
    if A.arrival > A.last then redis.call('HSET', K_CLOCKS, 'backlog', fmt(A.arrival)) end
    call_chunked('ZADD', K_READY, A.ready)
  end
end
