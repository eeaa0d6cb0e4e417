"""Spark's own log lines, with their Java stack traces cut to their first lines.

A trigger that fails in Spark (a sink that cannot write, say) is logged by Spark four or five
times over, each with the whole Java stack: the task's error (``Utils``, ``Executor``), its
loss (``TaskSetManager``, the stack inside its message) and the job's abort
(``FileFormatWriter``). About 220 lines per failed trigger, and a pod retries each failing
partition's batch with backoff: live, 2,700 of a pod's last 3,000 log lines were Java frames,
which every log pipeline then ships and bills. The same failure reaches the handler as a
Python exception, which the pod logs itself with its root cause (and the whole stack at its
first attempt: `consumer.attempts`).

`shorten` swaps the console appender of Spark's defaults profile for one whose layout prints
every line Spark logs, but of a stack trace only the exception and its first frame (the
root cause first: ``%rEx{short}``), and of a message that carries a stack in its text only
the lines before the first frame. It does nothing under another log4j configuration (the
user's own, through ``-Dlog4j2.configurationFile``), nor in a Spark Connect client, which has
no JVM.
"""

from __future__ import annotations

import logging
from typing import Any, Final

logger = logging.getLogger(__name__)

#: The console layout of Spark's defaults profile (``log4j2-defaults.properties``).
SPARKS_PATTERN: Final = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
#: The same lines, a stack trace cut to the root cause's first line and frame, and a stack
#: written into a message (``TaskSetManager``'s "Lost task ...") cut at its first frame.
SHORT_PATTERN: Final = (
    "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %replace{%m}{(?s)\\r?\\n\\s+at .*}{ (stack cut)}%n%rEx{short}"
)
#: The name of the appender Spark's profile writes through.
APPENDER: Final = "console"


def shorten(session: Any) -> bool:
    """Cut the Java stacks of the JVM's log lines, if Spark's defaults profile is the one
    loaded; True when it did. A failure to do so leaves Spark's lines as they were."""
    jvm = getattr(session, "_jvm", None)
    if jvm is None:  # Spark Connect: the server logs, not this process
        return False
    try:
        log4j = jvm.org.apache.logging.log4j
        context = log4j.LogManager.getContext(False)
        config = context.getConfiguration()
        old = config.getAppender(APPENDER)
        layout = None if old is None else old.getLayout()
        pattern = getattr(layout, "getConversionPattern", lambda: None)()
        if pattern != SPARKS_PATTERN:
            return False  # a configuration of the user's: theirs to set
        short = (
            log4j.core.layout.PatternLayout.newBuilder()
            .withPattern(SHORT_PATTERN)
            .withConfiguration(config)
            .build()
        )
        target = getattr(log4j.core.appender, "ConsoleAppender$Target").SYSTEM_ERR
        builder = log4j.core.appender.ConsoleAppender.newBuilder()
        builder.setName(APPENDER).setTarget(target).setLayout(short)
        new = builder.build()
        new.start()
        root = config.getRootLogger()
        root.removeAppender(APPENDER)
        config.getAppenders().put(APPENDER, new)
        root.addAppender(new, None, None)
        context.updateLoggers()
        old.stop()
    except Exception as e:  # py4j or log4j refused: Spark's lines stay whole
        logger.debug("Spark's log layout left as it was: %r", e)
        return False
    return True
