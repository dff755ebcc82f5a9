-- The canonical trace schema (docs/design.md, "Canonical trace schema"). Every source is
-- normalized into these tables once, at ingest; analyses never see source formats.
-- Each column line ends with a comment "unit: description"; `wanscope schema` prints them.
-- Times are integer nanoseconds on the source's own clock; end_ns >= start_ns always.

CREATE TABLE sources (
  source_id INTEGER,            -- -: index of the input file, in the order given
  path VARCHAR,                 -- -: the file as given on the command line
  format VARCHAR,               -- -: kineto or nsys
  rank INTEGER,                 -- -: distributed rank of the file (distributedInfo.rank, else the file's position)
  event_count BIGINT            -- count: trace events read from the file
);

CREATE TABLE kernels (
  rank INTEGER,                 -- -: distributed rank
  device INTEGER,               -- -: GPU index
  stream BIGINT,                -- -: CUDA stream id (HIP stream for AMD traces)
  start_ns BIGINT,              -- ns: kernel start on the GPU
  end_ns BIGINT,                -- ns: kernel end on the GPU
  dur_ns BIGINT,                -- ns: end_ns - start_ns
  name VARCHAR,                 -- -: kernel name as recorded (demangled)
  correlation BIGINT,           -- -: CUPTI correlation id, shared with the launching API call
  pid BIGINT,                   -- -: host process that launched it (NULL when the launch is not in the trace)
  grid INTEGER[],               -- blocks: grid size [x, y, z]
  block INTEGER[],              -- threads: block size [x, y, z]
  registers_per_thread INTEGER, -- registers: per thread, as compiled
  shared_mem_bytes BIGINT,      -- bytes: static + dynamic shared memory per block
  name_norm VARCHAR             -- -: the name in one spelling whichever tool demangled it (trace/names.py), for matching across traces
);

CREATE TABLE memops (
  kind VARCHAR,                 -- -: memcpy or memset
  copy_kind VARCHAR,            -- -: HtoD, DtoH, DtoD, HtoH, PtoP, ... (NULL for memset)
  bytes BIGINT,                 -- bytes: bytes copied or set
  name VARCHAR,                 -- -: name as recorded, e.g. "Memcpy HtoD (Pageable -> Device)"
  rank INTEGER,                 -- -: distributed rank
  device INTEGER,               -- -: GPU index
  stream BIGINT,                -- -: CUDA stream id
  start_ns BIGINT,              -- ns: start on the GPU
  end_ns BIGINT,                -- ns: end on the GPU
  dur_ns BIGINT,                -- ns: end_ns - start_ns
  correlation BIGINT,           -- -: CUPTI correlation id
  pid BIGINT                    -- -: host process that issued it
);

CREATE TABLE api_calls (
  kind VARCHAR,                 -- -: runtime or driver
  name VARCHAR,                 -- -: call name, a trailing _v + 4 or more digits stripped
  raw_name VARCHAR,             -- -: call name as recorded
  rank INTEGER,                 -- -: distributed rank
  pid BIGINT,                   -- -: host process
  tid BIGINT,                   -- -: host thread
  start_ns BIGINT,              -- ns: call entry on the host
  end_ns BIGINT,                -- ns: call return on the host
  dur_ns BIGINT,                -- ns: end_ns - start_ns
  correlation BIGINT            -- -: CUPTI correlation id, shared with the GPU work it issued
);

CREATE TABLE cpu_ops (
  id BIGINT,                    -- -: unique row id within the database
  parent_id BIGINT,             -- -: id of the innermost enclosing range on the same thread, the one that started last (NULL at the top)
  depth INTEGER,                -- levels: the range's ancestors (parent, parent's parent, ...), 0 at the top
  kind VARCHAR,                 -- -: op (aten and other dispatcher ops), python (a frame), annotation (record_function), nvtx
  name VARCHAR,                 -- -: op name, Python frame "file.py(line): function", or range text
  rank INTEGER,                 -- -: distributed rank
  pid BIGINT,                   -- -: host process
  tid BIGINT,                   -- -: host thread
  start_ns BIGINT,              -- ns: range start on the host
  end_ns BIGINT,                -- ns: range end on the host
  dur_ns BIGINT,                -- ns: end_ns - start_ns
  external_id BIGINT,           -- -: Kineto External id (links an aten op to the API calls it made; not a correlation id)
  input_dims VARCHAR,           -- -: recorded input shapes as JSON text (record_shapes=True), else NULL
  input_types VARCHAR,          -- -: recorded input dtypes as JSON text ("Input type": c10::BFloat16, float, Scalar, ...), else NULL
  concrete_inputs VARCHAR       -- -: recorded scalar arguments as JSON text ("Concrete Inputs", "" for a tensor), else NULL
);

CREATE TABLE steps (
  rank INTEGER,                 -- -: distributed rank
  step INTEGER,                 -- -: step number from the range name
  name VARCHAR,                 -- -: range name, wanscope/step#k or ProfilerStep#N
  pid BIGINT,                   -- -: host process
  tid BIGINT,                   -- -: host thread that ran the step
  start_ns BIGINT,              -- ns: CPU range start
  end_ns BIGINT                 -- ns: CPU range end
);

CREATE TABLE cuda_syncs (
  kind VARCHAR,                 -- -: what the GPU-side record says was waited on (stream, event, device, ...)
  rank INTEGER,                 -- -: distributed rank
  device INTEGER,               -- -: GPU index
  stream BIGINT,                -- -: CUDA stream id
  start_ns BIGINT,              -- ns: start
  end_ns BIGINT,                -- ns: end
  correlation BIGINT,           -- -: correlation id of the waiting API call
  pid BIGINT                    -- -: host process
);

CREATE TABLE memory_events (
  rank INTEGER,                 -- -: distributed rank
  device INTEGER,               -- -: GPU index, -1 for the CPU's memory
  pid BIGINT,                   -- -: host process
  tid BIGINT,                   -- -: host thread that allocated or freed
  ts_ns BIGINT,                 -- ns: when, on the host clock (rows in the trace's order)
  total_allocated BIGINT,       -- bytes: the allocator's allocated total after the event (its change since the device's previous event is what the event allocated or freed)
  total_reserved BIGINT,        -- bytes: the allocator's reserved total after the event (caching allocator)
  addr BIGINT                   -- -: the block's address (an allocation and its free share it)
);

CREATE TABLE devices (
  rank INTEGER,                 -- -: distributed rank
  device INTEGER,               -- -: GPU index
  name VARCHAR,                 -- -: GPU name
  compute_capability VARCHAR,   -- -: major.minor
  sm_count INTEGER,             -- SMs: streaming multiprocessors
  total_memory_bytes BIGINT,    -- bytes: device memory
  peak_bf16_tflops DOUBLE,      -- TFLOP/s: dense BF16 peak where the source records one (none does yet), else NULL; the rooflines take the datasheet table's
  memory_bandwidth_gbps DOUBLE  -- GB/s: peak DRAM bandwidth where the source records it (Nsight Systems does), else NULL
);

CREATE TABLE meta (
  source_id INTEGER,            -- -: input file the entry came from
  key VARCHAR,                  -- -: e.g. producer, schema_version, cuda_runtime_version
  value VARCHAR                 -- -: the value as text
);

CREATE TABLE ingest_warnings (
  source_id INTEGER,            -- -: input file
  kind VARCHAR,                 -- -: what was wrong with the records (no_timing, zero_duration, end_before_start, ...)
  count BIGINT                  -- count: records of that kind, excluded from the analyses (zero_duration ones are kept)
);

-- Tables below hold data only Nsight Systems exports provide (empty for other sources).

CREATE TABLE profiler_overhead (
  source_id INTEGER,            -- -: input file
  name VARCHAR,                 -- -: what the profiler did, e.g. "CUDA profiling data flush overhead", "CUPTI Buffer flush"
  rank INTEGER,                 -- -: distributed rank
  pid BIGINT,                   -- -: host process the overhead was spent in
  tid BIGINT,                   -- -: host thread
  start_ns BIGINT,              -- ns: start on the host clock
  end_ns BIGINT,                -- ns: end
  dur_ns BIGINT                 -- ns: end_ns - start_ns
);

CREATE TABLE gpu_contexts (
  source_id INTEGER,            -- -: input file
  rank INTEGER,                 -- -: distributed rank
  pid BIGINT,                   -- -: host process that owns the context
  device INTEGER,               -- -: GPU index
  context BIGINT                -- -: CUDA context id, as nsys reports print it ("Context ID")
);

CREATE TABLE nvtx_ranges (
  source_id INTEGER,            -- -: input file
  rank INTEGER,                 -- -: distributed rank
  pid BIGINT,                   -- -: host process
  tid BIGINT,                   -- -: host thread that opened the range
  style VARCHAR,                -- -: PushPop (nvtxRangePush/Pop) or StartEnd (nvtxRangeStart/End)
  domain VARCHAR,               -- -: NVTX domain name, NULL for the default domain or an unnamed one
  name VARCHAR,                 -- -: range text (the same ranges are in cpu_ops, kind nvtx)
  start_ns BIGINT,              -- ns: range start on the host
  end_ns BIGINT,                -- ns: range end on the host
  dur_ns BIGINT                 -- ns: end_ns - start_ns
);
