-- dead_letter. ARGV: now, id, lease, reason, dead_letter_cap, result_ttl.
-- Returns LOST when the receipt is lost, else how many old dead letters were
-- dropped past the cap.
local now = clock_now()
local id, lease = ARGV[2], ARGV[3]
if not current(id, lease) then return LOST end
release(id, now)
return bury(id, ARGV[4], now, tonumber(ARGV[5]), ARGV[6])
