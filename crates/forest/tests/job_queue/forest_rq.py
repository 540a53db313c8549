"""RQ (python-rq, https://python-rq.org) against `forest serve`: the job function and the
steps that tests/serve_job_queue.rs runs, each as `python3 forest_rq.py STEP HOST PORT ...`.

  enqueue HOST PORT FIRST COUNT  enqueue jobs job-FIRST .. job-(FIRST+COUNT-1), each running
                                 square(i); prints "sent job-i" before and "acked job-i" after
                                 each enqueue, "gone job-i" and exit 3 if the server went away
  work HOST PORT                 one RQ worker in burst mode: runs every queued job, then exits
  check HOST PORT ID...          every named job is finished with its result stored; the queue
                                 and the failed-job registry are empty

The job appends its id to the file named by FOREST_RQ_LOG, so the test can count runs.
"""

import os
import sys

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from rq import Queue, Worker, get_current_job
from rq.job import Job, JobStatus

QUEUE = "forest"


def square(n):
    """The job: records that it ran (one short append, atomic under O_APPEND), returns n*n."""
    job = get_current_job()
    with open(os.environ["FOREST_RQ_LOG"], "a", encoding="ascii") as log:
        log.write(job.id + "\n")
    return n * n


def connect(host, port):
    # No retries: the test kills the server, and a retried enqueue would blur which one was
    # acknowledged.
    return Redis(host=host, port=int(port), retry=None, socket_timeout=30)


def enqueue(host, port, first, count):
    queue = Queue(QUEUE, connection=connect(host, port))
    for i in range(int(first), int(first) + int(count)):
        job_id = f"job-{i}"
        print(f"sent {job_id}", flush=True)
        try:
            queue.enqueue("forest_rq.square", i, job_id=job_id, result_ttl=-1)
        except (RedisConnectionError, ConnectionError, OSError):
            print(f"gone {job_id}", flush=True)
            sys.exit(3)
        print(f"acked {job_id}", flush=True)


def work(host, port):
    connection = connect(host, port)
    worker = Worker([Queue(QUEUE, connection=connection)], connection=connection)
    worked = worker.work(burst=True, logging_level="WARNING")
    print(f"worker done ({'jobs run' if worked else 'no job run'})")


def check(host, port, ids):
    connection = connect(host, port)
    queue = Queue(QUEUE, connection=connection)
    problems = []
    for job_id in ids:
        n = int(job_id.split("-")[1])
        try:
            job = Job.fetch(job_id, connection=connection)
        except Exception as e:  # noqa: BLE001 - any failure to fetch is the finding
            problems.append(f"{job_id}: not found ({e!r})")
            continue
        status = job.get_status()
        result = job.return_value()
        if status != JobStatus.FINISHED or result != n * n:
            problems.append(f"{job_id}: status {status}, result {result!r} (want {n * n})")
    if len(queue) != 0:
        problems.append(f"queue {QUEUE} still holds {len(queue)} jobs: {queue.job_ids[:10]}")
    failed = queue.failed_job_registry.get_job_ids()
    if failed:
        problems.append(f"failed jobs: {failed[:10]}")
    for p in problems:
        print(p)
    print(f"checked {len(ids)} jobs: {len(problems)} problems")
    sys.exit(1 if problems else 0)


def main():
    step, host, port, *rest = sys.argv[1:]
    if step == "enqueue":
        enqueue(host, port, *rest)
    elif step == "work":
        work(host, port)
    elif step == "check":
        check(host, port, rest)
    else:
        sys.exit(f"unknown step {step}")


if __name__ == "__main__":
    main()
