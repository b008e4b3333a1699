-- next_due. ARGV: now. Notes the clock first (SPEC 3, Clock steps: after a
-- step back the timers move before they are read), then returns the
-- soonest `not_before` of the delayed items, or "" when there is none.
clock_now()
return next_due()
