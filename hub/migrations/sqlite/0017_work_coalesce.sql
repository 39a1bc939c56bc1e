-- A coalescing enqueue (NewWork::coalesce) looks for a pending item of the
-- same target and kind that has not run yet; pending items are few, the
-- done ones many.
CREATE INDEX work_items_pending_target ON work_items (target, kind) WHERE state = 'pending';
