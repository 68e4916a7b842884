/*
 * montrace's SPANK plugin: every task of every job step becomes a montrace run.
 *
 * In `slurm_spank_task_init` (the task's own process, already the job's user, just before
 * slurmstepd would exec the task) it execs instead
 *
 *     montrace slurm task --dir DIR [--agent SOCKET] -- ARGV...
 *
 * with the job's environment, so that montrace is the task and the job's command its child:
 * the tree is recorded from its first process, exactly, through the node's resident agent
 * (`montrace agent`), with no privilege on the user's side. `montrace slurm task` labels the
 * run with the job's id, step, user, partition, account, array index and requested resources.
 *
 * The job's command is never lost to montrace: if montrace cannot be executed, the plugin says
 * why on the task's stderr and returns, and slurmstepd runs the task as it would have; once
 * montrace runs, it execs the command bare when it cannot record (docs/cluster.md).
 *
 * plugstack.conf:
 *     required /usr/lib/x86_64-linux-gnu/slurm/montrace_spank.so \
 *         montrace=/usr/local/bin/montrace dir=/var/spool/montrace agent=/run/montrace/agent.sock
 *
 * A user opts a job out with `--montrace=off` (sbatch, srun, salloc).
 *
 * Build: cc -shared -fPIC -O2 -o montrace_spank.so montrace_spank.c (needs slurm/spank.h,
 * Debian's libslurm-dev).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(montrace, 1);

static int opted_out = 0;

static int opt_cb(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    if (optarg && strcmp(optarg, "off") == 0) {
        opted_out = 1;
        return 0;
    }
    if (optarg && strcmp(optarg, "on") == 0) {
        opted_out = 0;
        return 0;
    }
    slurm_error("montrace: --montrace takes on or off, not '%s'", optarg ? optarg : "");
    return -1;
}

static struct spank_option montrace_option = {
    "montrace", "on|off", "Record this job's tasks with montrace (default: on)", 1, 0, opt_cb};

/* Registered here rather than through a `spank_options` table, which sbatch and salloc do not
 * offer (only srun does, in Slurm 22.05). */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_option_register(sp, &montrace_option);
}

/* The value of `key=` among the plugin's arguments, or NULL. */
static const char *arg_value(int ac, char **av, const char *key)
{
    size_t len = strlen(key);
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], key, len) == 0 && av[i][len] == '=')
            return av[i] + len + 1;
    }
    return NULL;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    if (!spank_remote(sp) || opted_out)
        return 0;
    const char *montrace = arg_value(ac, av, "montrace");
    const char *dir = arg_value(ac, av, "dir");
    const char *agent = arg_value(ac, av, "agent");
    if (!montrace || !dir) {
        slurm_error("montrace: plugstack.conf must give montrace=PATH and dir=DIR; "
                    "this task runs unrecorded");
        return 0;
    }
    int argc = 0;
    char **argv = NULL;
    char **env = NULL;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || argc < 1) {
        slurm_error("montrace: could not read the task's command; it runs unrecorded");
        return 0;
    }
    /* montrace slurm task --dir DIR [--agent SOCKET] -- ARGV... NULL */
    char **wrapped = calloc((size_t)argc + 9, sizeof(char *));
    if (!wrapped)
        return 0;
    int n = 0;
    wrapped[n++] = (char *)montrace;
    wrapped[n++] = "slurm";
    wrapped[n++] = "task";
    wrapped[n++] = "--dir";
    wrapped[n++] = (char *)dir;
    if (agent) {
        wrapped[n++] = "--agent";
        wrapped[n++] = (char *)agent;
    }
    wrapped[n++] = "--";
    for (int i = 0; i < argc; i++)
        wrapped[n++] = argv[i];
    wrapped[n] = NULL;
    execve(montrace, wrapped, env);
    /* Still here: montrace could not be executed. The task runs as it would have. */
    fprintf(stderr, "montrace: cannot execute %s (%s); this task runs unrecorded\n", montrace,
            strerror(errno));
    free(wrapped);
    return 0;
}
