-- close: remove this handle's consumer from the group of each stream where
-- it holds no pending entries (removing a consumer drops its PEL entries,
-- which would strand them). ARGV: now (unused), consumer.
-- Returns how many streams kept the consumer because it still holds entries.
local kept = 0
for _, stream in ipairs({ K_BACKLOG, K_DUE }) do
  local ok, r = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', 1, ARGV[2])
  if ok and type(r) == 'table' and #r == 0 then
    pcall(redis.call, 'XGROUP', 'DELCONSUMER', stream, GROUP, ARGV[2])
  else
    kept = kept + 1
  end
end
return kept
