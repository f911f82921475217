/* coprocess.c: a helper process over two pipes (coprocess.h). */
#include "coprocess.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

forge_status forge_coprocess_start(forge_coprocess *c, const char *command) {
    memset(c, 0, sizeof *c);
    snprintf(c->what, sizeof c->what, "%s", command);
    int in[2], out[2];
    if (pipe(in) != 0) return forge_error(FORGE_ERR_IO, "coprocess \"%s\": pipe: %s", c->what, strerror(errno));
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\": pipe: %s", c->what, strerror(errno));
    }
    fflush(NULL); /* nothing buffered is written twice by the child */
    pid_t pid = fork();
    if (pid < 0) {
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\": fork: %s", c->what, strerror(errno));
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execl("/bin/sh", "sh", "-c", command, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->pid = pid;
    c->to = fdopen(in[1], "w");
    c->from = fdopen(out[0], "r");
    if (!c->to || !c->from) {
        if (c->to) fclose(c->to);
        else close(in[1]);
        if (c->from) fclose(c->from);
        else close(out[0]);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        c->pid = 0;
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\": fdopen failed", c->what);
    }
    signal(SIGPIPE, SIG_IGN); /* a helper that died shows up as a write error, not as our death */
    return FORGE_OK;
}

forge_status forge_coprocess_send(forge_coprocess *c, const char *line) {
    if (fprintf(c->to, "%s\n", line) < 0 || fflush(c->to) != 0)
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\": cannot write \"%s\" (did it exit?)", c->what, line);
    return FORGE_OK;
}

forge_status forge_coprocess_recv(forge_coprocess *c, char *buf, size_t cap) {
    if (!fgets(buf, (int)cap, c->from))
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\": it ended before answering (its messages are above)",
                           c->what);
    buf[strcspn(buf, "\n")] = 0;
    return FORGE_OK;
}

forge_status forge_coprocess_finish(forge_coprocess *c) {
    if (!c->pid) return FORGE_OK;
    if (c->to) fclose(c->to);
    if (c->from) fclose(c->from);
    int st = 0;
    pid_t r;
    do r = waitpid(c->pid, &st, 0);
    while (r < 0 && errno == EINTR);
    c->pid = 0;
    if (r < 0) return forge_error(FORGE_ERR_IO, "coprocess \"%s\": waitpid: %s", c->what, strerror(errno));
    if (WIFSIGNALED(st))
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\" was killed by signal %d", c->what, WTERMSIG(st));
    if (WEXITSTATUS(st) != 0)
        return forge_error(FORGE_ERR_IO, "coprocess \"%s\" exited with status %d", c->what, WEXITSTATUS(st));
    return FORGE_OK;
}
