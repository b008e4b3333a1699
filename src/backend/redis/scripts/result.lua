-- Outcomes and progress (SPEC 3). ARGV: now, op, ...
-- outcome: id; returns {found, kind, value, at, events_tail} (found 0/1).
-- progress: id, lease, bytes (fenced); returns 1, or 0 when the receipt is lost.
-- chunk: id, lease, bytes (fenced); returns the chunk's seq, or 0 when lost.
-- get_progress: id; returns {found 0/1, bytes}.
-- chunks: id, after_seq; returns {{seq, data...}, finished 0/1, events_tail}.
local op = ARGV[2]
local id = ARGV[3]
-- An outcome that expired takes the item's progress and chunks with it,
-- even before the purge.
local function expired(now)
  local exp = redis.call('ZSCORE', K_OUT_EXP, pad(id))
  return exp and tonumber(exp) <= now
end
local function live_outcome(now)
  local exp = redis.call('ZSCORE', K_OUT_EXP, pad(id))
  if not exp or tonumber(exp) <= now then return nil end
  return outcome_of(id)
end
if op == 'outcome' then
  local f = live_outcome(clock_now())
  if f then return { 1, f[1], f[2], f[3], events_tail() } end
  return { 0, '', '', '0', events_tail() }
elseif op == 'get_progress' then
  if expired(clock_now()) then return { 0, '' } end
  local p = redis.call('GET', prog_key(id))
  if p then return { 1, p } end
  return { 0, '' }
elseif op == 'progress' then
  if not current(id, ARGV[4]) then return 0 end
  redis.call('SET', prog_key(id), ARGV[5])
  event(id)
  return 1
elseif op == 'chunk' then
  if not current(id, ARGV[4]) then return 0 end
  local seq = redis.call('RPUSH', chunks_key(id), ARGV[5])
  event(id)
  return seq
else
  local after = tonumber(ARGV[4])
  local now = clock_now()
  local f = live_outcome(now)
  local finished = 0
  if f then finished = 1 end
  local list = {}
  if not expired(now) then list = redis.call('LRANGE', chunks_key(id), after, -1) end
  return { list, finished, events_tail() }
end
