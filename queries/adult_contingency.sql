-- Contingency tables of three attributes against the income class on UCI Adult.
-- Sent as one script: one ε covers all three tables (total sensitivity = the sum).
-- Run: dpsql run queries/adult_contingency.sql --metadata data/datasets/adult.yaml --epsilon 1
SELECT education, "salary-class", COUNT(*) AS n FROM adult GROUP BY education, "salary-class";
SELECT sex, "salary-class", COUNT(*) AS n FROM adult GROUP BY sex, "salary-class";
SELECT CASE WHEN age < 30 THEN '17-29' WHEN age < 45 THEN '30-44' WHEN age < 60 THEN '45-59'
            ELSE '60-90' END AS age_band,
       "salary-class", COUNT(*) AS n
FROM adult GROUP BY age_band, "salary-class";
