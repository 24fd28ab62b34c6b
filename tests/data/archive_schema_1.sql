-- The archive tables as engines of schema 1 (commit 347bc00) created them in SQLite: a frozen copy.
CREATE TABLE meta (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);
CREATE TABLE programs (
	id INTEGER NOT NULL, 
	task VARCHAR(128) NOT NULL, 
	island INTEGER NOT NULL, 
	generation INTEGER NOT NULL, 
	operator VARCHAR(64) NOT NULL, 
	source TEXT NOT NULL, 
	source_hash VARCHAR(64) NOT NULL, 
	cell_key VARCHAR(256), 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_programs_task_hash ON programs (task, source_hash);
CREATE INDEX ix_programs_operator ON programs (operator);
CREATE TABLE stats_history (
	id INTEGER NOT NULL, 
	task VARCHAR(128) NOT NULL, 
	island INTEGER NOT NULL, 
	children_done INTEGER NOT NULL, 
	cells INTEGER NOT NULL, 
	coverage FLOAT NOT NULL, 
	qd_score FLOAT NOT NULL, 
	best_speedup FLOAT, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_stats_history_task ON stats_history (task);
CREATE TABLE lineage (
	child_id INTEGER NOT NULL, 
	parent_id INTEGER NOT NULL, 
	role VARCHAR(16) NOT NULL, 
	PRIMARY KEY (child_id, parent_id, role), 
	FOREIGN KEY(child_id) REFERENCES programs (id), 
	FOREIGN KEY(parent_id) REFERENCES programs (id)
);
CREATE INDEX ix_lineage_parent_id ON lineage (parent_id);
CREATE TABLE evaluations (
	id INTEGER NOT NULL, 
	program_id INTEGER NOT NULL, 
	status VARCHAR(32) NOT NULL, 
	reason TEXT NOT NULL, 
	speedup FLOAT, 
	runtime_ms FLOAT, 
	ref_runtime_ms FLOAT, 
	runtime_spread FLOAT, 
	timing_representative BOOLEAN NOT NULL, 
	device VARCHAR(128) NOT NULL, 
	shapes_checked INTEGER NOT NULL, 
	registers INTEGER, 
	spills INTEGER, 
	shared_bytes INTEGER, 
	num_warps INTEGER, 
	num_stages INTEGER, 
	error TEXT NOT NULL, 
	wall_s FLOAT NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(program_id) REFERENCES programs (id)
);
CREATE INDEX ix_evaluations_program_id ON evaluations (program_id);
CREATE TABLE cells (
	task VARCHAR(128) NOT NULL, 
	island INTEGER NOT NULL, 
	"key" VARCHAR(256) NOT NULL, 
	program_id INTEGER NOT NULL, 
	fitness FLOAT NOT NULL, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY (task, island, "key"), 
	FOREIGN KEY(program_id) REFERENCES programs (id)
);
CREATE TABLE migrations (
	id INTEGER NOT NULL, 
	program_id INTEGER NOT NULL, 
	task VARCHAR(128) NOT NULL, 
	src_island INTEGER NOT NULL, 
	dst_island INTEGER NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(program_id) REFERENCES programs (id)
);
CREATE TABLE llm_calls (
	id INTEGER NOT NULL, 
	program_id INTEGER, 
	task VARCHAR(128) NOT NULL, 
	island INTEGER NOT NULL, 
	operator VARCHAR(64) NOT NULL, 
	model VARCHAR(256) NOT NULL, 
	prompt TEXT NOT NULL, 
	response TEXT NOT NULL, 
	prompt_tokens INTEGER NOT NULL, 
	completion_tokens INTEGER NOT NULL, 
	cost_usd FLOAT NOT NULL, 
	latency_s FLOAT NOT NULL, 
	error TEXT NOT NULL, 
	created_at FLOAT NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(program_id) REFERENCES programs (id)
);
