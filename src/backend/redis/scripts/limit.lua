-- Flow limits (SPEC 3, Flow limits). ARGV: now, op, ...
-- set: flow, kind ("rate"/"cap"/"until"), a, b: rate a permits per b ms
--   (a = "" clears), cap a ("" clears), until a ms ("" lifts). Returns 1.
-- back_off: flow, d: hold the flow until now + d ms by this script's
--   clock, unless a hold at least that long is in force (then nothing
--   changes): one step, so two consumers backing off at once keep the
--   longer. Returns 1.
-- list: returns {{flow, n, per, cap, til, used, pend, held, may 0/1}...}
--   for every flow with a limit in force, by name.
local now = clock_now()
local op = ARGV[2]

-- Set one limit of `flow` (the `set` arguments) and settle its record.
local function set_limit(flow, kind, a, b)
  local st = lim_get(flow)
  if not st then
    -- A new record counts the flow's pending items once.
    local pend = 0
    for _, m in ipairs(redis.call('ZRANGE', K_PENDING, 0, -1)) do
      if redis.call('HGET', item_key(unpad(m)), 'flow') == flow then pend = pend + 1 end
    end
    st = { n = 0, per = 0, cap = 0, til = 0, ws = 0, used = 0, pend = pend, held = 0, hd = '', hb = '' }
  end
  if kind == 'rate' then
    if a == '' then
      st.n, st.per, st.ws, st.used = 0, 0, 0, 0
    else
      st.n, st.per = tonumber(a), tonumber(b)
    end
  elseif kind == 'cap' then
    st.cap = tonumber(a) or 0
  else
    local t = tonumber(a) or 0
    if t <= now then t = 0 end
    st.til = t
  end
  lim_settle(flow, st, now)
  wake()
end

if op == 'set' then
  set_limit(ARGV[3], ARGV[4], ARGV[5], ARGV[6])
  return 1
elseif op == 'back_off' then
  local flow = ARGV[3]
  local til = now + (tonumber(ARGV[4]) or 0)
  local st = lim_get(flow)
  if st and st.til >= til then return 1 end
  set_limit(flow, 'until', fmt(til), '')
  return 1
end
local out = {}
local flows = redis.call('SMEMBERS', K_LIMITS)
table.sort(flows)
for _, flow in ipairs(flows) do
  local st = lim_get(flow)
  if st and lim_in_force(st, now) then
    local til = 0
    if st.til > now then til = st.til end
    local may = 0
    if lim_may(st, now) then may = 1 end
    out[#out + 1] = { flow, st.n, st.per, st.cap, til, lim_used(st, now), st.pend, st.held, may }
  end
end
return out
