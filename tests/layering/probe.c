/*
 * A source file of the module whose library this probe links, including
 * PROBE_HEADER (a compile definition). tests/layering/check.sh builds one
 * probe per arrow: those STYLE.md allows must compile, the others must fail
 * because the header is not on the module's include path.
 */
#include PROBE_HEADER

int dp_layering_probe(void);
int dp_layering_probe(void)
{
    return 0;
}
