"""What the tests share: fixtures for real daemons (sshd, SLURM, Docker), fault helpers, records."""
