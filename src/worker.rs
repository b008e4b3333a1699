//! Worker runtime (the worker issue fills this in).
