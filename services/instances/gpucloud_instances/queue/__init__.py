"""The admission queue: which queued jobs and instances start, and each tenant's line."""
