"""Jobs in the database and the loop that runs them (`closer worker`, or in-process)."""
