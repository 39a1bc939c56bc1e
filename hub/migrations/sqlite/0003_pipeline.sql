-- Pipeline progress of each revision: which effects are done and when each
-- phase was entered (JSON, written by the hub's typed model).
ALTER TABLE agent_revisions ADD COLUMN progress TEXT NOT NULL DEFAULT '{}';
