-- The store schema before Alembic (meshplan schema 1, Base.metadata.create_all), as the database saw it.
CREATE TABLE plans (
	id VARCHAR(64) NOT NULL, 
	created_at VARCHAR(32) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	gpu VARCHAR(64) NOT NULL, 
	num_gpus INTEGER NOT NULL, 
	status VARCHAR(32) NOT NULL, 
	step_time_s FLOAT, 
	tokens_per_s FLOAT, 
	mfu FLOAT, 
	fits BOOLEAN, 
	request_json TEXT NOT NULL, 
	response_json TEXT NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_plans_created_at ON plans (created_at);

CREATE INDEX ix_plans_gpu ON plans (gpu);

CREATE INDEX ix_plans_model ON plans (model);

CREATE TABLE profiles (
	id VARCHAR(64) NOT NULL, 
	created_at VARCHAR(32) NOT NULL, 
	model VARCHAR(128) NOT NULL, 
	device TEXT NOT NULL, 
	source VARCHAR(32) NOT NULL, 
	profile_json TEXT NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_profiles_created_at ON profiles (created_at);

CREATE INDEX ix_profiles_model ON profiles (model);

CREATE TABLE runs (
	id VARCHAR(64) NOT NULL, 
	created_at VARCHAR(32) NOT NULL, 
	model TEXT NOT NULL, 
	world_size INTEGER NOT NULL, 
	measured_step_time_s FLOAT NOT NULL, 
	predicted_step_time_s FLOAT, 
	step_time_ratio FLOAT, 
	report_json TEXT NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_runs_created_at ON runs (created_at);
