-- peek / backlog_by_flow, read only. ARGV: now, mode ("peek"/"flows"), n.
-- Walks claim order (unread due lane, delayed items already due, unread
-- backlog). peek skips paused flows and returns {{id, flow, payload, enq,
-- nb, dlv}...}; flows counts every item and returns {flow...}.
local now = clock_now()
local peek = ARGV[2] == 'peek'
local n = tonumber(ARGV[3])
local out = {}
local function visit(id)
  local f = redis.call('HMGET', item_key(id), 'flow', 'payload', 'enq', 'nb', 'dlv')
  if not f[2] then return end
  local flow = f[1] or ''
  if peek then
    if flow == '' or redis.call('SISMEMBER', K_PAUSED, flow) == 0 then
      out[#out + 1] = { id, flow, f[2], f[3] or '0', f[4] or '', f[5] or '0' }
    end
  else
    out[#out + 1] = flow
  end
end
local function last_delivered(stream)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then return '0-0' end
  for _, g in ipairs(groups) do
    local name, last = nil, nil
    for i = 1, #g - 1, 2 do
      if g[i] == 'name' then name = g[i + 1] end
      if g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == GROUP and last then return last end
  end
  return '0-0'
end
local function walk_stream(stream)
  local from = last_delivered(stream)
  while #out < n do
    local page = redis.call('XRANGE', stream, '(' .. from, '+', 'COUNT', 200)
    if #page == 0 then return end
    for _, e in ipairs(page) do
      from = e[1]
      local id = entry_field(e[2], 'id')
      if id then visit(id) end
      if #out >= n then return end
    end
  end
end
walk_stream(K_DUE)
local offset = 0
while #out < n do
  local page = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', offset, 200)
  if #page == 0 then break end
  offset = offset + #page
  for _, m in ipairs(page) do
    visit(unpad(m))
    if #out >= n then break end
  end
end
walk_stream(K_BACKLOG)
return out
