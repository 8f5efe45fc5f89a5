"""Helper scripts for the multi-device / multi-host training tests (not tests themselves)."""
