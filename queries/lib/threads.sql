-- lib/threads: which kernel thread a task is, told from its comm (the one place each is told).
-- include: (none)
-- internal: _compaction_kind, _is_kswapd

-- Who compacted: 'kcompactd' for the kcompactdN threads (background compaction),
-- 'direct' for every other task (an allocation that compacts in its own context).
-- compaction_run_pairing's kind (lib/compaction.sql); analyses apply it to the rows of
-- other compaction events by their comm.
CREATE TEMP MACRO _compaction_kind(comm) AS
  CASE WHEN comm LIKE 'kcompactd%' THEN 'kcompactd' ELSE 'direct' END;

-- Who reclaimed: true for the kswapdN threads (background reclaim, vmstat's *_kswapd
-- counters), false for a task reclaiming in its own context (*_direct).
CREATE TEMP MACRO _is_kswapd(comm) AS comm LIKE 'kswapd%';
