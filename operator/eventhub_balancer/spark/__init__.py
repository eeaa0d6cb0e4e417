"""The PySpark side of the consumer: a SparkSession and one DataFrame per micro-batch.

Kept apart from ``consumer`` so that users without Spark never import pyspark, and below it
in the layers so that the consumer runtime decides when a batch counts as done (the
checkpoint moves only after the user's ``process(df, context)`` returned). Modules here
import pyspark inside functions: importing the package must stay cheap.
"""
