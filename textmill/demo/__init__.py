"""`textmill demo` (`run`): the whole chain on a generated web, and that web itself (`synthweb`), which the
tests serve too."""
