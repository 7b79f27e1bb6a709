"""`bertology prepare`: a corpus of any size -> sharded TFRecords of a family's instances, on Apache Beam."""
