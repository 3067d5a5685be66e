"""Reading the store column-wise: the decoded columns (schema.py), the numpy/Arrow decoder
(columnar.py: ``StoreFiles``) and the JSON line both ways (jsonline.py), for the mount's views,
Spark and followers. Importing columnar.py loads numpy.
"""
