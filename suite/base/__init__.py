"""What every layer of the runner shares: errors, the log line, paths, JSON files, statistics, the
environment-variable policy. Standard library only."""
