"""The grader: it runs each student's answers in a sandboxed worker and the book's checks in its
own process, and only data crosses between them. One file per defence (``THREATS.md`` maps each
attack to the layer that stops it and the test that proves it):

* ``review.py``: the static reading of the submitted source (what to mark "needs review");
* ``sandbox.py``: OS isolation of the worker (bubblewrap, no network, read-only files, seccomp);
* ``wire.py``: the data format between grader and worker, and its limits (no pickle);
* ``proxy.py``: the grader's side of the worker: calls, replies, time budgets;
* ``_worker.py``: the worker (runs the student's code, records forbidden calls);
* ``grading.py``: the class: reading submissions, grading each student, the CSV files.

``python -m fundamentallm.course grade`` is the command; ``fundamentallm.course.grading`` (and
``proxy``, ``sandbox``, ``wire``) are kept as aliases of these modules.
"""
