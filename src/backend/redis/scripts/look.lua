-- peek / backlog_by_flow, read only. ARGV: now, mode ("peek"/"flows"), n.
-- Walks claim order: the due lane with the delayed items already due
-- ranked into it as a promotion now would (SPEC 3, Priority), then the
-- backlog, each with the held items of the limited flows that may run now
-- in their places and the items of flows held by their limits left out
-- (SPEC 3, Flow limits). peek skips paused flows and returns {{id, flow,
-- payload, enq, nb, dlv, pri, cost}...}; flows counts every item and
-- returns {flow...}.
local now = clock_view()
local peek = ARGV[2] == 'peek'
local n = tonumber(ARGV[3])
local out = {}
-- The limited flows: true when they may run now.
local may = {}
for _, flow in ipairs(redis.call('SMEMBERS', K_LIMITS)) do
  local st = lim_get(flow)
  if st then may[flow] = lim_may(st, now) end
end
local function visit(id)
  local f = redis.call('HMGET', item_key(id), 'flow', 'payload', 'enq', 'nb', 'dlv', 'pri', 'cost')
  if not f[2] then return end
  local flow = f[1] or ''
  if may[flow] == false then return end
  if peek then
    if flow == '' or redis.call('SISMEMBER', K_PAUSED, flow) == 0 then
      out[#out + 1] = { id, flow, f[2], f[3] or '0', f[4] or '', f[5] or '0', f[6] or '0', f[7] or '1' }
    end
  else
    out[#out + 1] = flow
  end
end
-- Entries {rank, position, id} merged into a walk, sorted.
local function sorted(list)
  table.sort(list, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  return list
end
-- The held items of the flows that may run, at most n per flow.
local function held_of(li)
  local list = {}
  for flow, ok in pairs(may) do
    if ok and not (peek and redis.call('SISMEMBER', K_PAUSED, flow) == 1) then
      local page = redis.call('ZRANGE', held_key(flow, li), 0, n - 1, 'WITHSCORES')
      for i = 1, #page, 2 do
        list[#list + 1] = { tonumber(page[i + 1]), member_pos(page[i]), member_id(page[i]) }
      end
    end
  end
  return list
end
-- The delayed items a promotion now would move, with their ranks, and the
-- held items of the due lane.
local ready = held_of(0)
local clock = tonumber(redis.call('HGET', K_CLOCKS, 'due') or '0')
local pos = tonumber(redis.call('GET', K_POS) or '0')
local due_now = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'WITHSCORES')
for i = 1, #due_now, 2 do
  local id = unpad(due_now[i])
  local nb = tonumber(due_now[i + 1])
  if nb > clock then clock = nb end
  pos = pos + 1
  local boost = tonumber(redis.call('HGET', item_key(id), 'boost') or '0')
  ready[#ready + 1] = { clock - boost, pos, id }
end
sorted(ready)
local function walk(zset, merge)
  local r = 1
  local offset = 0
  while #out < n do
    local page = redis.call('ZRANGE', zset, offset, offset + 199, 'WITHSCORES')
    if #page == 0 then break end
    offset = offset + #page / 2
    for i = 1, #page, 2 do
      local score, p = tonumber(page[i + 1]), member_pos(page[i])
      while merge[r] and (merge[r][1] < score or (merge[r][1] == score and merge[r][2] < p)) do
        visit(merge[r][3])
        r = r + 1
        if #out >= n then return end
      end
      local id = member_id(page[i])
      if id then visit(id) end
      if #out >= n then return end
    end
  end
  while #out < n and merge[r] do
    visit(merge[r][3])
    r = r + 1
  end
end
walk(K_READY_DUE, ready)
walk(K_READY, sorted(held_of(1)))
return out
